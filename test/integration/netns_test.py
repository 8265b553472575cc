"""netns.py on its own (no rpx): the app/svc topology and Istio-style redirect rules do what the
sidecar tests rely on. A listener on the outbound port in the app namespace answers each
connection with its SO_ORIGINAL_DST; a listener in the svc namespace answers with its tag.

    cd test/integration && /usr/bin/python3 run_all.py netns_test

Needs root. Skips where the kernel refuses network namespaces; fails (with the reason) where no
iptables can be had (netns.available() installs Debian's iptables once if it is missing). Not a
*_test.py, so the full integration run does not pick it up."""

import os
import subprocess
import unittest

import netns
from netns import ADMIN_PORT, INBOUND_PORT, LOOP_MARK, OUTBOUND_PORT, PROXY_UID

SVC_PORT = 8080     # a real listener in svc
APP_PORT = 9080     # the application's port in app (inbound traffic to it is captured)
LOCAL_PORT = 8081   # a listener on 127.0.0.1 in app (never captured)
OFF_LINK = "203.0.113.7"  # TEST-NET-3: nothing there; reachable only through the default route


def reply(line):
    """("tag", "original dst", "local", "peer") from a SERVER_CODE answer."""
    parts = line.split()
    if len(parts) != 4:
        raise AssertionError("unexpected answer %r" % line)
    return tuple(parts)


class RedirectTest(unittest.TestCase):
    """One topology for the class; each test installs the rule set it needs."""

    @classmethod
    def setUpClass(cls):
        netns.require()
        cls.t = netns.Topology()
        try:
            t = cls.t
            t.start_listener(t.app, "outbound", "0.0.0.0", OUTBOUND_PORT)
            t.start_listener(t.app, "inbound", "0.0.0.0", INBOUND_PORT)
            t.start_listener(t.app, "admin", "0.0.0.0", ADMIN_PORT)
            t.start_listener(t.app, "app", "0.0.0.0", APP_PORT)
            t.start_listener(t.app, "local", "127.0.0.1", LOCAL_PORT)
            t.start_listener(t.svc, "svc", t.svc_ip, SVC_PORT)
        except Exception:
            cls.t.close()
            raise

    @classmethod
    def tearDownClass(cls):
        cls.t.close()

    def install(self, **kwargs):
        kw = dict(proxy_uid=PROXY_UID, exclude_inbound_ports=[ADMIN_PORT],
                  inbound_interface=self.t.app_if)
        kw.update(kwargs)
        return netns.install_redirect(self.t.app, **kw)

    def setUp(self):
        self.install()

    def tearDown(self):
        netns.remove_redirect(self.t.app)

    def out(self, host, port, **kwargs):
        return reply(self.t.connect(self.t.app, host, port, **kwargs))

    def test_outbound_is_redirected_and_keeps_its_original_destination(self):
        tag, orig, local, peer = self.out(self.t.svc_ip, SVC_PORT)
        self.assertEqual((tag, orig), ("outbound", "%s:%d" % (self.t.svc_ip, SVC_PORT)))
        self.assertEqual(local, "127.0.0.1:%d" % OUTBOUND_PORT)
        self.assertTrue(peer.startswith(self.t.app_ip + ":"), peer)
        # Also where nothing listens and the address is off-link (through the default route).
        self.assertEqual(self.out(OFF_LINK, 443)[:2], ("outbound", OFF_LINK + ":443"))
        self.assertEqual(self.out(self.t.svc_ip, 5432)[:2],
                         ("outbound", "%s:5432" % self.t.svc_ip))

    def test_the_proxy_user_is_not_redirected(self):
        tag, orig, local, peer = self.out(self.t.svc_ip, SVC_PORT, uid=PROXY_UID)
        self.assertEqual(tag, "svc")
        self.assertEqual(local, "%s:%d" % (self.t.svc_ip, SVC_PORT))
        self.assertTrue(peer.startswith(self.t.app_ip + ":"), peer)
        # Another unprivileged user is captured: the exemption is the proxy's uid, not "not root".
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, uid=PROXY_UID + 1)[0], "outbound")

    def test_the_proxy_group_is_not_redirected_when_exempted(self):
        self.install(proxy_gid=PROXY_UID + 1)
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, uid=2000, gid=PROXY_UID + 1)[0], "svc")
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, uid=2000, gid=2000)[0], "outbound")

    def test_localhost_is_not_redirected(self):
        tag, orig, local, _ = self.out("127.0.0.1", LOCAL_PORT)
        self.assertEqual((tag, local), ("local", "127.0.0.1:%d" % LOCAL_PORT))

    def test_excluded_outbound_cidr_is_not_redirected(self):
        self.install(exclude_outbound_cidrs=["%s/32" % self.t.svc_ip])
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT)[0], "svc")
        self.assertEqual(self.out(OFF_LINK, 443)[0], "outbound")

    def test_excluded_outbound_port_is_not_redirected(self):
        self.install(exclude_outbound_ports=[SVC_PORT])
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT)[0], "svc")
        self.assertEqual(self.out(self.t.svc_ip, 5432)[0], "outbound")

    def test_inbound_passthrough_source_is_not_redirected(self):
        # With the mark rule alone (no uid rule), a connection to the application from 127.0.0.6
        # (InboundPassthroughCluster's source address) is still not captured; from elsewhere it is.
        self.install(proxy_uid=None, mark=LOOP_MARK)
        tag, _, local, peer = self.out(self.t.app_ip, APP_PORT, source="127.0.0.6")
        self.assertEqual((tag, local), ("app", "%s:%d" % (self.t.app_ip, APP_PORT)))
        self.assertTrue(peer.startswith("127.0.0.6:"), peer)
        self.assertEqual(self.out(self.t.app_ip, APP_PORT, source="127.0.0.7")[0], "outbound")

    def test_marked_sockets_are_not_redirected_in_mark_mode(self):
        rules = self.install(proxy_uid=None, mark=LOOP_MARK)
        self.assertIn(["-A", "RPX_OUTPUT", "-m", "mark", "--mark", "0x539", "-j", "RETURN"], rules)
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, mark=LOOP_MARK)[0], "svc")
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, mark=LOOP_MARK + 1)[0], "outbound")
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT)[0], "outbound")
        # Without the uid rule, the proxy's user is captured like anyone else.
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT, uid=PROXY_UID)[0], "outbound")

    def test_inbound_is_redirected_except_excluded_ports(self):
        tag, orig, local, peer = reply(self.t.connect(self.t.svc, self.t.app_ip, APP_PORT))
        self.assertEqual((tag, orig), ("inbound", "%s:%d" % (self.t.app_ip, APP_PORT)))
        self.assertEqual(local, "%s:%d" % (self.t.app_ip, INBOUND_PORT))
        self.assertTrue(peer.startswith(self.t.svc_ip + ":"), peer)
        tag, orig, local, _ = reply(self.t.connect(self.t.svc, self.t.app_ip, ADMIN_PORT))
        self.assertEqual((tag, local), ("admin", "%s:%d" % (self.t.app_ip, ADMIN_PORT)))
        # Inside app, the application's own port is reached directly by the proxy's user (what
        # the inbound passthrough does after reading the original destination).
        tag, _, local, _ = self.out(self.t.app_ip, APP_PORT, uid=PROXY_UID)
        self.assertEqual((tag, local), ("app", "%s:%d" % (self.t.app_ip, APP_PORT)))

    def test_install_is_idempotent_and_remove_restores_direct_paths(self):
        before = netns.nat_rules(self.t.app)
        self.install()
        self.assertEqual(netns.nat_rules(self.t.app), before)
        for chain in netns.CHAINS:
            self.assertIn("-N " + chain, before)
        self.assertIn("-A OUTPUT -p tcp -j RPX_OUTPUT", before)
        self.assertIn("-A PREROUTING -i %s -p tcp -j RPX_INBOUND" % self.t.app_if, before)
        self.assertIn("-A RPX_OUTPUT -m owner --uid-owner %d -j RETURN" % PROXY_UID, before)
        self.assertIn("-A RPX_INBOUND -p tcp -m tcp --dport %d -j RETURN" % ADMIN_PORT, before)

        netns.remove_redirect(self.t.app)
        after = netns.nat_rules(self.t.app)
        self.assertFalse([l for l in after if "RPX_" in l], after)
        self.assertEqual(self.out(self.t.svc_ip, SVC_PORT)[0], "svc")
        self.assertEqual(reply(self.t.connect(self.t.svc, self.t.app_ip, APP_PORT))[0], "app")
        netns.remove_redirect(self.t.app)  # twice is harmless

    def test_rules_need_a_loop_exemption(self):
        with self.assertRaises(ValueError):
            netns.redirect_rules(proxy_uid=None)
        # Inbound capture alone needs none (nothing is sent to the outbound port).
        rules = netns.redirect_rules(proxy_uid=None, outbound_port=None)
        self.assertFalse([r for r in rules if "RPX_OUTPUT" in r and r[0] == "-A"], rules)


class TeardownTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        netns.require()

    def links(self):
        return subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                              check=True).stdout.splitlines()

    def test_nothing_is_left_behind(self):
        links = self.links()
        with netns.topology() as t:
            names = t.namespaces
            self.assertEqual(len(names), 2)
            for n in names:
                self.assertIn(n, netns.list_namespaces())
            netns.install_redirect(t.app, proxy_uid=PROXY_UID)
            p = t.start_listener(t.svc, "svc", t.svc_ip, SVC_PORT)
            # Something started without the topology's knowledge goes too (ip netns pids).
            stray = netns.start_in(t.app, ["sleep", "300"])
        self.assertIsNotNone(p.poll())
        stray.wait(5)
        for n in names:
            self.assertNotIn(n, netns.list_namespaces())
        self.assertEqual(self.links(), links)

    def test_teardown_after_an_error_in_the_body(self):
        with self.assertRaises(ZeroDivisionError):
            with netns.topology() as t:
                names = t.namespaces
                1 / 0
        for n in names:
            self.assertNotIn(n, netns.list_namespaces())

    def test_namespaces_are_unique_per_run_and_per_topology(self):
        with netns.topology() as a, netns.topology() as b:
            self.assertEqual(len(set(a.namespaces + b.namespaces)), 4)
            for n in a.namespaces + b.namespaces:
                self.assertIn("-%d-" % os.getpid(), n)
            # Same addresses and ports in both, yet each reaches its own: they are private to
            # each topology's namespaces.
            self.assertEqual((a.app_ip, a.svc_ip), (b.app_ip, b.svc_ip))
            a.start_listener(a.svc, "svc-a", a.svc_ip, SVC_PORT)
            b.start_listener(b.svc, "svc-b", b.svc_ip, SVC_PORT)
            self.assertEqual(reply(a.connect(a.app, a.svc_ip, SVC_PORT))[0], "svc-a")
            self.assertEqual(reply(b.connect(b.app, b.svc_ip, SVC_PORT))[0], "svc-b")

if __name__ == "__main__":
    unittest.main()
