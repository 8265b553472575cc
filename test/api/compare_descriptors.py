#!/usr/bin/python3
"""Compares every file, message, enum, field, oneof and service of rpx's api/ descriptor set with
Envoy's canonical one: full name, number, name, type, label, type name, JSON name and oneof must be
identical. Usage: compare_descriptors.py CANONICAL.pb MINE.pb (FileDescriptorSets)."""
import sys
from google.protobuf import descriptor_pb2 as d
def load(p):
    s = d.FileDescriptorSet(); s.ParseFromString(open(p, 'rb').read()); return s
canon, mine = load(sys.argv[1]), load(sys.argv[2])
def index(fds):
    M, E, FILE, SVC = {}, {}, {}, {}
    def walk(prefix, fname, msgs, enums):
        for e in enums: E[prefix + '.' + e.name] = (e, fname)
        for m in msgs:
            n = prefix + '.' + m.name; M[n] = (m, fname); walk(n, fname, m.nested_type, m.enum_type)
    for f in fds.file:
        FILE[f.name] = f
        walk('.' + f.package, f.name, f.message_type, f.enum_type)
        for s in f.service: SVC['.' + f.package + '.' + s.name] = (s, f.name)
    return M, E, FILE, SVC
CM, CE, CF, CS = index(canon); MM, ME, MF, MS = index(mine)
errs = []; nf = nm = ne = 0
for fname, f in MF.items():
    if fname.startswith('google/protobuf/'): continue
    if fname not in CF: errs.append('file not canonical: ' + fname); continue
    if f.package != CF[fname].package: errs.append('package mismatch ' + fname)
    if f.syntax != 'proto3': errs.append('not proto3 ' + fname)
for n, (e, fname) in ME.items():
    if fname.startswith('google/protobuf/'): continue
    ne += 1
    if n not in CE: errs.append('enum not canonical: ' + n); continue
    ce, cfn = CE[n]
    if cfn != fname: errs.append('enum %s in wrong file %s (canonical %s)' % (n, fname, cfn))
    a = [(v.name, v.number) for v in e.value]; b = [(v.name, v.number) for v in ce.value]
    if a != b: errs.append('enum values differ %s: %s vs %s' % (n, a, b))
for n, (m, fname) in MM.items():
    if fname.startswith('google/protobuf/'): continue
    nm += 1
    if n not in CM: errs.append('message not canonical: ' + n); continue
    cm, cfn = CM[n]
    if cfn != fname: errs.append('message %s in wrong file %s (canonical %s)' % (n, fname, cfn))
    if m.options.map_entry != cm.options.map_entry: errs.append('map_entry differs ' + n)
    cfields = {x.number: x for x in cm.field}
    for fl in m.field:
        nf += 1
        c = cfields.get(fl.number)
        if c is None: errs.append('%s.%s number %d not in canonical' % (n, fl.name, fl.number)); continue
        for attr in ('name', 'type', 'label', 'type_name', 'proto3_optional', 'json_name'):
            if getattr(fl, attr) != getattr(c, attr):
                errs.append('%s.%s: %s %r vs canonical %r' % (n, fl.name, attr, getattr(fl, attr), getattr(c, attr)))
        mo = m.oneof_decl[fl.oneof_index].name if fl.HasField('oneof_index') else None
        co = cm.oneof_decl[c.oneof_index].name if c.HasField('oneof_index') else None
        if mo != co: errs.append('%s.%s: oneof %r vs canonical %r' % (n, fl.name, mo, co))
    # reserved numbers in mine must not be used by canonical fields (sanity)
    for r in m.reserved_range:
        for num in range(r.start, r.end):
            if num in cfields: errs.append('%s reserves %d which canonical uses' % (n, num))
for n, (s, fname) in MS.items():
    if n not in CS: errs.append('service not canonical ' + n); continue
    cs = CS[n][0]
    a = [(x.name, x.input_type, x.output_type, x.client_streaming, x.server_streaming) for x in s.method]
    b = [(x.name, x.input_type, x.output_type, x.client_streaming, x.server_streaming) for x in cs.method]
    if a != b: errs.append('service differs %s' % n)
print('checked %d messages, %d fields, %d enums, %d services' % (nm, nf, ne, len(MS)))
print('\n'.join(errs) if errs else 'ALL MATCH CANONICAL')
sys.exit(1 if errs else 0)
