"""Repository rules that let Bazel 4 build offline against Debian's packages."""

def _debian_rules_cc_impl(rctx):
    # Debian's rules_cc 0.0.4 wants Bazel 5's use_cpp_toolchain(); patch it for Bazel 4.
    src = rctx.path("/usr/share/bazel/rules/cc")
    rctx.execute(["cp", "-r", str(src) + "/.", "."])
    for f in ["cc/private/rules_impl/compiler_flag.bzl", "cc/private/rules_impl/cc_flags_supplier.bzl"]:
        p = rctx.path(f)
        if not p.exists:
            continue
        text = rctx.read(p)
        text = text.replace('"find_cpp_toolchain", "use_cpp_toolchain"', '"find_cpp_toolchain"')
        text = text.replace("use_cpp_toolchain()", '["@bazel_tools//tools/cpp:toolchain_type"]')
        rctx.file(f, text)

debian_rules_cc = repository_rule(implementation = _debian_rules_cc_impl, local = True)

def _remote_coverage_tools_stub_impl(rctx):
    # cc_test depends on @remote_coverage_tools, normally a download. Coverage is done outside Bazel.
    rctx.file("WORKSPACE", "workspace(name = \"remote_coverage_tools\")\n")
    rctx.file("unavailable.sh", "#!/bin/sh\necho 'coverage tools unavailable offline' >&2\nexit 1\n", executable = True)
    rctx.file("BUILD.bazel", """
sh_binary(name = "coverage_report_generator", srcs = ["unavailable.sh"], visibility = ["//visibility:public"])
sh_binary(name = "lcov_merger", srcs = ["unavailable.sh"], visibility = ["//visibility:public"])
""")

remote_coverage_tools_stub = repository_rule(implementation = _remote_coverage_tools_stub_impl)

def _system_library_impl(rctx):
    args = ["pkg-config"] + rctx.attr.modules
    cflags = rctx.execute(args + ["--cflags"])
    libs = rctx.execute(args + ["--libs"])
    if cflags.return_code != 0 or libs.return_code != 0:
        fail("pkg-config failed for %s: %s%s (run tools/setup.sh)" % (rctx.attr.modules, cflags.stderr, libs.stderr))
    copts = [f for f in cflags.stdout.strip().split(" ") if f and f != "-I/usr/include"]
    linkopts = [f for f in libs.stdout.strip().split(" ") if f] + rctx.attr.extra_linkopts
    rctx.file("WORKSPACE", "workspace(name = \"%s\")\n" % rctx.name)
    rctx.file("BUILD.bazel", """
load("@rules_cc//cc:defs.bzl", "cc_library")
cc_library(
    name = "lib",
    copts = %r,
    linkopts = %r,
    visibility = ["//visibility:public"],
)
""" % (copts, linkopts))

system_library = repository_rule(
    implementation = _system_library_impl,
    attrs = {
        "modules": attr.string_list(mandatory = True),
        "extra_linkopts": attr.string_list(),
    },
    local = True,
)
