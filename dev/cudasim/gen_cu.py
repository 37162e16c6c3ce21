#!/usr/bin/env python3
"""The simulated device's build step: rewrites one CUDA source (.cu) into host
C++ that the simulator runs (dev/cudasim/include/cudasim/device.h is forced in
by the compiler flags). Only what host C++ cannot express is touched; every
other byte, and every line number, stays as it was (a #line directive names
the original file), so compiler messages and the simulator's own point at the
product source:

  K<<<grid, block[, smem[, stream]]>>>(args)
      -> ::cudasim::launch(SITE, [](auto... a) { K(a...); }, grid, block...)(args)
     (the arguments are evaluated once, by value, as a launch does; a kernel
     template's arguments are deduced from them as nvcc would);
  __global__ ... K(params) {
      -> the body starts with a prologue telling the simulator, before any
     thread runs, the kernel's address, name, __launch_bounds__ and static
     shared memory (so a launch a card refuses is refused the same way);
  __shared__ T a[N], b[M];   (in a kernel)
      -> T (&a)[N] = ::cudasim::shared_var<T[N]>(KEY, ALIGN, "a"), (&b)[M] = ...;
     (one copy per block, in the block's shared memory; the name is for the
     simulator's messages about accesses out of its bounds or racing);
  extern __shared__ [__align__(A)] T name[];
      -> T *const name = ::cudasim::dynamic_shared<T>(A);
  asm [volatile] ("template" : outputs : inputs);
      -> a call of the simulator's PTX (gen_asm.py; include/cudasim/ptx.h);

Written for ferry's backend/ops/*.cu and the simulator's own tests; a construct it
does not understand (a __shared__ variable outside a kernel body, a launch
whose kernel expression it cannot find) ends the build with a message naming
the file and line rather than being passed through.

usage: gen_cu.py INPUT.cu OUTPUT.cpp [SOURCE-ROOT [DEPFILE]]
"""
import os
import re
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gen_asm  # noqa: E402  (the inline PTX's rewrite, beside this file)


class GenError(Exception):
    pass


def mask_text(text):
    """The text with comments, string and character literals blanked (same
    length, newlines kept), so searches see only code."""
    out = list(text)
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith('//', i):
            j = text.find('\n', i)
            j = n if j < 0 else j
            for k in range(i, j):
                out[k] = ' '
            i = j
        elif text.startswith('/*', i):
            j = text.find('*/', i + 2)
            j = n if j < 0 else j + 2
            for k in range(i, j):
                if text[k] != '\n':
                    out[k] = ' '
            i = j
        elif c == '"' or c == "'":
            # A raw string is not expected in kernels; plain literals only.
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == '\\' else 1
            for k in range(i + 1, min(j, n)):
                if text[k] != '\n':
                    out[k] = ' '
            i = j + 1
        elif c == '#':
            # Preprocessor lines stay visible (macros may hold launches), but a
            # #include's <...> must not read as template brackets.
            j = text.find('\n', i)
            j = n if j < 0 else j
            line = text[i:j]
            if re.match(r'#\s*include', line):
                for k in range(i, j):
                    out[k] = ' '
            i = j
        else:
            i += 1
    return ''.join(out)


IDENT = re.compile(r'[A-Za-z_]\w*')


def line_of(text, pos):
    return text.count('\n', 0, pos) + 1


def match_close(m, pos, open_ch, close_ch):
    """Index of the bracket closing the one at m[pos]."""
    depth = 0
    for i in range(pos, len(m)):
        if m[i] == open_ch:
            depth += 1
        elif m[i] == close_ch:
            depth -= 1
            if depth == 0:
                return i
    raise GenError('unbalanced %s at offset %d' % (open_ch, pos))


def match_open_back(m, pos, open_ch, close_ch):
    """Index of the bracket opening the one closed at m[pos]."""
    depth = 0
    for i in range(pos, -1, -1):
        if m[i] == close_ch:
            depth += 1
        elif m[i] == open_ch:
            depth -= 1
            if depth == 0:
                return i
    raise GenError('unbalanced %s at offset %d' % (close_ch, pos))


def skip_ws(m, i):
    while i < len(m) and m[i].isspace():
        i += 1
    return i


def skip_ws_back(m, i):
    while i >= 0 and m[i].isspace():
        i -= 1
    return i


def split_top(s, sep=','):
    """s split at `sep` outside (), [], {} and <> nesting."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch in '([{<':
            depth += 1
        elif ch in ')]}>':
            depth -= 1
        if ch == sep and depth == 0:
            parts.append(''.join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append(''.join(cur))
    return parts


class Kernel:
    def __init__(self, name, tparams, bounds, body_open, body_close, tparam_text):
        self.name = name
        self.tparams = tparams          # template parameter names, in order
        self.tparam_text = tparam_text  # "template <...>" or ''
        self.bounds = bounds            # first __launch_bounds__ argument, or '0'
        self.body_open = body_open
        self.body_close = body_close
        self.shared_types = []          # type texts of the static __shared__ variables
        self.local_decls = []           # using/typedef/constexpr statements the types may need
        self.device_smem = []           # helper calls: static shared memory of device functions called


def find_kernels(text, m, path):
    kernels = []
    for g in re.finditer(r'\b__global__\b', m):
        at = g.start()
        # A template header just before (qualifiers like static may sit between).
        j = skip_ws_back(m, at - 1)
        while True:
            w = re.search(r'(static|inline|extern)\s*$', m[:j + 1])
            if not w:
                break
            j = skip_ws_back(m, w.start() - 1)
        tparams, tparam_text = [], ''
        if j >= 0 and m[j] == '>':
            o = match_open_back(m, j, '<', '>')
            k = skip_ws_back(m, o - 1)
            if m[k - 7:k + 1] == 'template':
                inner = m[o + 1:j]
                tparam_text = 'template <' + text[o + 1:j] + '>'
                for p in split_top(inner):
                    p = p.split('=')[0].strip()
                    if '...' in p:
                        raise GenError('%s:%d: a variadic kernel template is not supported by the '
                                       'simulator' % (path, line_of(text, at)))
                    names = IDENT.findall(p)
                    if not names:
                        raise GenError('%s:%d: cannot read the template parameter "%s"'
                                       % (path, line_of(text, at), p))
                    tparams.append(names[-1])
        # Forward: [void] [__launch_bounds__(...)] name ( params ) ... { or ;
        i = g.end()
        bounds = '0'
        name = None
        while True:
            i = skip_ws(m, i)
            w = IDENT.match(m, i)
            if not w:
                break
            word = w.group(0)
            if word == '__launch_bounds__':
                p = skip_ws(m, w.end())
                q = match_close(m, p, '(', ')')
                bounds = split_top(text[p + 1:q])[0].strip()
                i = q + 1
                continue
            nxt = skip_ws(m, w.end())
            if nxt < len(m) and m[nxt] == '(':
                name = word
                i = match_close(m, nxt, '(', ')') + 1
                break
            i = w.end()
        if name is None:
            raise GenError('%s:%d: cannot find the name of this __global__ function'
                           % (path, line_of(text, at)))
        k = i
        while k < len(m) and m[k] not in '{;':
            k += 1
        if k >= len(m) or m[k] == ';':
            continue  # a declaration; its definition comes elsewhere
        close = match_close(m, k, '{', '}')
        kernels.append(Kernel(name, tparams, bounds, k, close, tparam_text))
    return kernels


def statement_end(m, i):
    """Index of the ';' ending the statement starting at i (outside brackets)."""
    depth = 0
    while i < len(m):
        ch = m[i]
        if ch in '([{':
            depth += 1
        elif ch in ')]}':
            depth -= 1
        elif ch == ';' and depth == 0:
            return i
        i += 1
    raise GenError('unterminated statement')


def file_key(path):
    return zlib.crc32(path.encode()) & 0xffff


def enclosing_function(m, at):
    """(body_open, body_close, paren_open) of the outermost function body
    around `at` (a brace block whose opening follows a parameter list), or
    None."""
    depth, opens = 0, []
    for i in range(at, -1, -1):
        if m[i] == '}':
            depth += 1
        elif m[i] == '{':
            if depth == 0:
                opens.append(i)
            else:
                depth -= 1
    for o in reversed(opens):  # outermost first
        j = skip_ws_back(m, o - 1)
        w = re.search(r'(const|noexcept|override)\s*$', m[:j + 1])
        while w:
            j = skip_ws_back(m, w.start() - 1)
            w = re.search(r'(const|noexcept|override)\s*$', m[:j + 1])
        if j >= 0 and m[j] == ')':
            return o, match_close(m, o, '{', '}'), match_open_back(m, j, '(', ')')
    return None


def device_fn_of(text, m, path, at, device_fns):
    """The device function around `at` (a Kernel record of its own: its
    static shared variables count for every kernel that calls it)."""
    enc = enclosing_function(m, at)
    if enc is None:
        return None
    body_open, body_close, paren = enc
    for f in device_fns:
        if f.body_open == body_open:
            return f
    j = skip_ws_back(m, paren - 1)
    w = re.search(r'([A-Za-z_]\w*)$', m[:j + 1])
    if not w:
        raise GenError('%s:%d: cannot find the name of the function holding this __shared__ '
                       'variable' % (path, line_of(text, at)))
    name = w.group(1)
    # Its template header: the statement before the name, from the previous ; { or }.
    b = w.start() - 1
    while b >= 0 and m[b] not in ';{}':
        b -= 1
    head = m[b + 1:w.start()]
    tparams, tparam_text = [], ''
    t = re.search(r'\btemplate\s*<', head)
    if t:
        o = b + 1 + t.end() - 1
        c = match_close(m, o, '<', '>')
        tparam_text = 'template <' + text[o + 1:c] + '>'
        for p in split_top(m[o + 1:c]):
            names = IDENT.findall(p.split('=')[0])
            if not names or '...' in p:
                raise GenError('%s:%d: cannot read the template parameter "%s"'
                               % (path, line_of(text, at), p.strip()))
            tparams.append(names[-1])
    if '__device__' not in head:
        raise GenError('%s:%d: a __shared__ variable in %s, which is not a __device__ function'
                       % (path, line_of(text, at), name))
    f = Kernel(name, tparams, '0', body_open, body_close, tparam_text)
    device_fns.append(f)
    return f


def rewrite_shared(text, m, path, kernels, edits, device_fns):
    """Edits (start, end, replacement) for every __shared__ declaration; the
    device functions holding static ones are added to device_fns."""
    idx = 0
    for s in re.finditer(r'\b__shared__\b', m):
        at = s.start()
        k = next((k for k in kernels if k.body_open < at < k.body_close), None)
        # The statement: back to the previous ; { or }, forward to its ;.
        b = at - 1
        while b >= 0 and m[b] not in ';{}':
            b -= 1
        start = skip_ws(m, b + 1)
        end = statement_end(m, at)
        stmt = m[start:end]
        original = text[start:end + 1]
        newlines = original.count('\n')
        ln = line_of(text, at)
        is_extern = re.match(r'extern\s+__shared__\b', stmt) is not None
        if k is None and not is_extern:
            k = device_fn_of(text, m, path, at, device_fns)
            if k is None:
                raise GenError('%s:%d: a __shared__ variable outside a function body: the '
                               'simulator sizes shared memory per kernel, so declare it in the '
                               'kernel or a device function it calls' % (path, ln))
        rest = stmt[stmt.index('__shared__') + len('__shared__'):]
        align = '0'
        a = re.search(r'__align__\s*\(([^)]*)\)', rest)
        if a:
            align = a.group(1).strip()
            rest = rest[:a.start()] + rest[a.end():]
        rest = rest.strip()
        if is_extern:
            d = re.match(r'(.*?)(\b[A-Za-z_]\w*)\s*\[\s*\]\s*$', rest, re.S)
            if not d:
                raise GenError('%s:%d: cannot read this extern __shared__ declaration' % (path, ln))
            typ = d.group(1).strip()
            repl = '%s *const %s = ::cudasim::dynamic_shared<%s>(%s);' % (typ, d.group(2), typ, align)
        else:
            decls = split_top(rest)
            first = re.match(r'(.*?)(\b[A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$', decls[0], re.S)
            if not first:
                raise GenError('%s:%d: cannot read this __shared__ declaration' % (path, ln))
            typ = first.group(1).strip()
            if '=' in rest:
                raise GenError('%s:%d: a __shared__ variable cannot have an initializer' % (path, ln))
            parts = [(first.group(2), first.group(3).strip())]
            for d in decls[1:]:
                dm = re.match(r'\s*(\b[A-Za-z_]\w*)\s*((?:\[[^\]]*\]\s*)*)$', d, re.S)
                if not dm:
                    raise GenError('%s:%d: cannot read the declarator "%s"' % (path, ln, d.strip()))
                parts.append((dm.group(1), dm.group(2).strip()))
            out = []
            for name, dims in parts:
                full = typ + dims
                key = (file_key(path) << 16) | idx
                idx += 1
                k.shared_types.append(full)
                ref = '(&%s)%s' % (name, dims) if dims else '&%s' % name
                out.append('%s = ::cudasim::shared_var<%s>(0x%xu, %s, "%s")' % (ref, full, key, align, name))
            repl = typ + ' ' + ', '.join(out) + ';'
        edits.append((start, end + 1, repl + '\n' * newlines))


def collect_local_decls(text, m, k):
    """Top-level using/typedef/constexpr statements of a kernel body that come
    before its last static __shared__ declaration: the size expression may
    name them."""
    last = max((s.start() for s in re.finditer(r'\b__shared__\b', m[k.body_open:k.body_close])),
               default=-1)
    if last < 0:
        return
    last += k.body_open
    i = k.body_open + 1
    while i < last:
        i = skip_ws(m, i)
        if i >= last:
            break
        if m[i] == '{':
            i = match_close(m, i, '{', '}') + 1
            continue
        end = statement_end(m, i)
        stmt = m[i:end]
        if re.match(r'(using\s+\w+\s*=|typedef\b|(static\s+)?constexpr\b)', stmt):
            k.local_decls.append(' '.join(text[i:end + 1].split()))
        i = end + 1


def decl_name(stmt):
    m = re.match(r'using\s+(\w+)\s*=', stmt)
    if m:
        return m.group(1)
    m = re.match(r'.*?(\w+)\s*=', stmt)
    if m and not stmt.startswith('typedef'):
        return m.group(1)
    names = IDENT.findall(stmt)
    return names[-1] if names else ''


def needed_decls(k):
    """The local declarations the shared types name, directly or through
    another needed one, in their order."""
    text = ' '.join(k.shared_types)
    need = [False] * len(k.local_decls)
    changed = True
    while changed:
        changed = False
        for i in range(len(k.local_decls) - 1, -1, -1):
            if not need[i] and re.search(r'\b%s\b' % re.escape(decl_name(k.local_decls[i])), text):
                need[i] = True
                text += ' ' + k.local_decls[i]
                changed = True
    return [d for d, n in zip(k.local_decls, need) if n]


def smem_helper_name(f):
    return 'cudasim_static_smem_%s_' % f.name


def smem_helper(f):
    """A constexpr function beside device function f: the bytes of its static
    shared variables, for the prologues of the kernels that call it."""
    body = ' '.join(needed_decls(f)) + ' return ::cudasim::smem_bytes<%s>();' % ', '.join(f.shared_types)
    head = f.tparam_text + ' ' if f.tparam_text else ''
    return ' %s[[maybe_unused]] constexpr unsigned long %s() { %s }' % (head, smem_helper_name(f), body)


def device_calls(text, m, path, kernels, device_fns):
    """For each kernel, the helper calls of the device functions with static
    shared memory it calls (their template arguments as written at the call).
    Such a function called from anywhere but a kernel body is refused."""
    for f in device_fns:
        for c in re.finditer(r'\b%s\b' % re.escape(f.name), m):
            at = c.start()
            k = next((k for k in kernels if k.body_open < at < k.body_close), None)
            i = skip_ws(m, c.end())
            targs = ''
            if i < len(m) and m[i] == '<':
                e = match_close(m, i, '<', '>')
                targs = text[i:e + 1]
                i = skip_ws(m, e + 1)
            if i >= len(m) or m[i] != '(':
                continue  # not a call (a declaration's name, an address)
            if k is None:
                enc = enclosing_function(m, at)
                if enc is None:
                    continue  # the definition's own name
                raise GenError('%s:%d: %s, which has __shared__ variables, is called from a '
                               'function that is not a kernel: the simulator counts them only '
                               'for kernels that call it directly' % (path, line_of(text, at), f.name))
            call = '%s%s()' % (smem_helper_name(f), ' '.join(targs.split()))
            if call not in k.device_smem:
                k.device_smem.append(call)


def prologue(k):
    fn = '&%s<%s>' % (k.name, ', '.join(k.tparams)) if k.tparams else '&%s' % k.name
    label = '%s<%s>' % (k.name, ', '.join(k.tparams)) if k.tparams else k.name
    if k.shared_types:
        body = ' '.join(needed_decls(k)) + ' return ::cudasim::smem_bytes<%s>();' % ', '.join(k.shared_types)
        size = '[]() constexpr -> unsigned long { %s }()' % body
    else:
        size = '0ul'
    for call in k.device_smem:
        size += ' + ' + call
    return (' if (::cudasim::kernel_entry(reinterpret_cast<const void *>(%s), "%s", %s, (%s))) '
            'return;' % (fn, label, size, k.bounds))


def find_launches(text, m, path, edits):
    for l in re.finditer(r'<<<', m):
        at = l.start()
        end = m.find('>>>', at)
        if end < 0:
            raise GenError('%s:%d: <<< without >>>' % (path, line_of(text, at)))
        # The kernel expression before <<<: name, ns::name, name<targs>, or (expr).
        j = skip_ws_back(m, at - 1)
        e = j
        if m[j] == '>':
            j = skip_ws_back(m, match_open_back(m, j, '<', '>') - 1)
        if m[j] == ')':
            j = match_open_back(m, j, '(', ')') - 1
        else:
            while j >= 0 and (m[j].isalnum() or m[j] in '_:'):
                j -= 1
        kstart = j + 1
        kexpr = text[kstart:e + 1]
        if not kexpr.strip() or not re.match(r'[\w:(]', kexpr.strip()):
            raise GenError('%s:%d: cannot find the kernel of this launch' % (path, line_of(text, at)))
        cfg = text[at + 3:end]
        name = ' '.join(kexpr.split())
        repl = ('::cudasim::launch(::cudasim::launch_site{"%s", __FILE__, __LINE__}, '
                '[](auto... cudasim_arg_) { %s(cudasim_arg_...); }, %s)'
                % (name.replace('"', '\\"'), kexpr.strip(), cfg.strip()))
        repl += '\n' * text[kstart:end + 3].count('\n')
        edits.append((kstart, end + 3, repl))


def generate(text, path):
    m = mask_text(text)
    kernels = find_kernels(text, m, path)
    for k in kernels:
        collect_local_decls(text, m, k)
    edits, device_fns = [], []
    rewrite_shared(text, m, path, kernels, edits, device_fns)
    for f in device_fns:
        collect_local_decls(text, m, f)
        edits.append((f.body_close + 1, f.body_close + 1, smem_helper(f)))
    device_calls(text, m, path, kernels, device_fns)
    find_launches(text, m, path, edits)
    edits += gen_asm.rewrite(text, m, path, match_close)
    for k in kernels:
        edits.append((k.body_open + 1, k.body_open + 1, prologue(k)))
    edits.sort(key=lambda e: (e[0], e[1]))
    out, pos = [], 0
    for start, end, repl in edits:
        if start < pos:
            raise GenError('%s:%d: overlapping rewrites (a launch inside a __shared__ '
                           'declaration?)' % (path, line_of(text, start)))
        out.append(text[pos:start])
        out.append(repl)
        pos = end
    out.append(text[pos:])
    return '#line 1 "%s"\n' % path + ''.join(out)


def main(argv):
    if len(argv) not in (3, 4, 5):
        sys.stderr.write('usage: gen_cu.py INPUT.cu OUTPUT.cpp [SOURCE-ROOT [DEPFILE]]\n')
        return 2
    src, dst = argv[1], argv[2]
    shown = os.path.relpath(src, argv[3]) if len(argv) >= 4 else src
    with open(src, encoding='utf-8') as f:
        text = f.read()
    deps = []
    try:
        if len(argv) >= 4:
            text = gen_asm.inline_headers(text, src, argv[3], shown, deps)
        result = generate(text, shown)
    except (GenError, gen_asm.AsmError) as e:
        sys.stderr.write('gen_cu.py: %s\n' % e)
        return 1
    tmp = dst + '.tmp'
    with open(tmp, 'w', encoding='utf-8') as f:
        f.write(result)
    os.replace(tmp, dst)
    if len(argv) == 5:  # the headers inlined, for the build to remake dst when one changes
        with open(argv[4], 'w', encoding='utf-8') as f:
            f.write('%s: %s\n' % (dst.replace(' ', '\\ '), ' '.join([src] + deps)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
