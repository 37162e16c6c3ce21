"""Part of the simulated device's build step (gen_cu.py): rewrites the inline
PTX of a .cu, which host C++ cannot run, into calls of the simulator's PTX
(dev/cudasim/ptx.cpp; include/cudasim/ptx.h says what it runs):

  asm [volatile] ("template" : "=r"(d0), ... : "r"(a0), ... [: clobbers]);
      -> { static const ::cudasim::ptx_insn cudasim_ptx_("template", __FILE__, __LINE__);
           cudasim_ptx_.run({::cudasim::ptx_op("=r", d0), ..., ::cudasim::ptx_op("r", a0)}); }

on one line, followed by the statement's own newlines, so line numbers stay.
The operands keep GCC's order (outputs, then inputs), which is the %N of the
template. Named operands ([name] "r"(x)) and asm goto are refused with a
message naming the file and line, as is an asm statement the rewrite cannot
read. A project header (a .cuh under the source root, included with quotes)
that holds inline asm is inlined first (inline_headers), between #line
directives, so its asm is rewritten too; the build's depfile names it."""
import os
import re


class AsmError(Exception):
    pass


INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*"([^"]+)"[^\n]*$', re.M)


def _has_asm(path, memo):
    """Whether the header at path, or a project header it includes, holds an
    asm statement (comments aside)."""
    if path in memo:
        return memo[path]
    memo[path] = False  # an include cycle is not asm
    with open(path, encoding='utf-8') as f:
        text = f.read()
    code = re.sub(r'//[^\n]*|/\*.*?\*/', ' ', text, flags=re.S)
    found = ASM.search(code) is not None
    for inc in INCLUDE.findall(text):
        sub = _resolve(os.path.dirname(path), inc, memo['__root__'])
        found = found or (sub is not None and _has_asm(sub, memo))
    memo[path] = found
    return found


def _resolve(here, inc, root):
    for cand in (os.path.join(here, inc), os.path.join(root, inc)):
        cand = os.path.normpath(cand)
        if os.path.isfile(cand) and os.path.abspath(cand).startswith(os.path.abspath(root) + os.sep):
            return cand
    return None


def inline_headers(text, src, root, shown, deps):
    """text (of the file src, named `shown` in #line directives) with every
    #include "..." of a project header under root that holds inline asm
    (directly or through its own includes) replaced by that header's text,
    itself so treated, between #line directives that keep each line's file
    and number: the rewrite below then reaches the asm of the headers too.
    The headers inlined are appended to deps (for the build's depfile)."""
    memo = {'__root__': root}
    out, pos = [], 0
    for m in INCLUDE.finditer(text):
        path = _resolve(os.path.dirname(src), m.group(1), root)
        if path is None or not _has_asm(path, memo):
            continue
        with open(path, encoding='utf-8') as f:
            body = f.read()
        rel = os.path.relpath(path, root)
        deps.append(path)
        body = inline_headers(body, path, root, rel, deps)
        if not body.endswith('\n'):
            body += '\n'
        line = text.count('\n', 0, m.start()) + 1
        out.append(text[pos:m.start()])
        out.append('#line 1 "%s"\n%s#line %d "%s"' % (rel, body, line + 1, shown))
        # the include's own line ends at m.end(); its newline stays, after the #line
        pos = m.end()
    out.append(text[pos:])
    return ''.join(out)


ASM = re.compile(r'\b(?:asm|__asm__|__asm)\b')
QUALIFIERS = re.compile(r'\s*(?:volatile|__volatile__|inline|goto)\b')


def _line(text, pos):
    return text.count('\n', 0, pos) + 1


def _split(m, text, start, end, sep):
    """(start, end) spans of text[start:end] split at `sep` outside brackets
    (m is the masked text: strings and comments blanked)."""
    spans, depth, at = [], 0, start
    for i in range(start, end):
        c = m[i]
        if c in '([{':
            depth += 1
        elif c in ')]}':
            depth -= 1
        elif c == sep and depth == 0:
            spans.append((at, i))
            at = i + 1
    spans.append((at, end))
    return spans


def _operands(m, text, start, end, path, line):
    """The operands of one section: [(constraint literal, expression)]."""
    out = []
    if not text[start:end].strip():
        return out
    for a, b in _split(m, text, start, end, ','):
        item = text[a:b].strip()
        if not item:
            raise AsmError('%s:%d: an empty asm operand' % (path, line))
        if item.startswith('['):
            raise AsmError('%s:%d: a named asm operand (%s): the simulator reads %%N operands only'
                           % (path, line, item.split(']')[0] + ']'))
        om = re.match(r'("(?:[^"\\]|\\.)*")\s*\((.*)\)$', item, re.S)
        if not om:
            raise AsmError('%s:%d: cannot read the asm operand "%s"' % (path, line, ' '.join(item.split())))
        out.append((om.group(1), ' '.join(om.group(2).split())))
    return out


def rewrite(text, m, path, match_close):
    """Edits (start, end, replacement) for every asm statement of text (m:
    its masked twin); match_close(m, pos, open, close) is gen_cu.py's
    bracket matcher."""
    edits = []
    for a in ASM.finditer(m):
        at, i = a.start(), a.end()
        line = _line(text, at)
        while True:
            q = QUALIFIERS.match(m, i)
            if not q:
                break
            if q.group(0).strip() == 'goto':
                raise AsmError('%s:%d: asm goto is not run by the simulator' % (path, line))
            i = q.end()
        while i < len(m) and m[i].isspace():
            i += 1
        if i >= len(m) or m[i] != '(':
            raise AsmError('%s:%d: cannot read this asm statement' % (path, line))
        close = match_close(m, i, '(', ')')
        j = close + 1
        while j < len(m) and m[j].isspace():
            j += 1
        if j >= len(m) or m[j] != ';':
            raise AsmError('%s:%d: an asm statement must end with ";" right after its ")"' % (path, line))
        sections = _split(m, text, i + 1, close, ':')
        if len(sections) > 4:
            raise AsmError('%s:%d: more than three ":" sections in an asm statement' % (path, line))
        tmpl = ' '.join(text[sections[0][0]:sections[0][1]].split())
        if not tmpl.startswith('"'):
            raise AsmError('%s:%d: an asm template must be string literals' % (path, line))
        ops = []
        for s in sections[1:3]:
            ops += _operands(m, text, s[0], s[1], path, line)
        args = ', '.join('::cudasim::ptx_op(%s, %s)' % (c, e) for c, e in ops)
        repl = ('{ static const ::cudasim::ptx_insn cudasim_ptx_(%s, __FILE__, __LINE__); '
                'cudasim_ptx_.run({%s}); }' % (tmpl, args))
        repl += '\n' * text[at:j + 1].count('\n')
        edits.append((at, j + 1, repl))
    return edits
