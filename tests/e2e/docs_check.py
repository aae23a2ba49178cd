#!/usr/bin/python3
"""Check markdown files as GitHub shows them: every relative link names a file or folder that
exists, every #anchor (in the same file or in a linked .md file) names a heading, slugged as
GitHub slugs it; and with --readme, the README's limits: at most --max-lines lines, none longer
than --max-width characters outside code blocks. Links inside code (fenced blocks, `spans`) and to
other sites are not checked. Prints a FAIL line per problem, then "PASSED FAILED" (the counts of
checks) as its last line; exits 1 when any failed."""
import argparse, os, re, sys, unicodedata

LINK = re.compile(r'!?\[((?:[^\[\]]|\[[^\]]*\])*)\]\(\s*<?([^)\s>]*)>?(?:\s+"[^"]*")?\s*\)')


def slug(text):
    """GitHub's heading ids (github-slugger): the rendered text lower-cased, every character that is
    not a letter, mark, number, connector punctuation, space or hyphen removed, spaces as hyphens."""
    text = re.sub(r'!?\[([^\]]*)\]\([^)]*\)', r'\1', text)  # links and images: their text
    text = re.sub(r'<[^>]+>', '', text)                     # inline HTML
    text = text.replace('`', '').replace('*', '').lower()
    keep = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in ' -' or cat[0] in 'LMN' or cat == 'Pc':
            keep.append('-' if ch == ' ' else ch)
    return ''.join(keep)


def prose_lines(path, spans=False):
    """(line number, text) of the lines outside fenced code blocks, inline code spans removed
    unless spans."""
    fence = None
    for n, line in enumerate(open(path, encoding='utf-8'), 1):
        line = line.rstrip('\n')
        m = re.match(r'^\s*(```+|~~~+)', line)
        if m:
            if fence is None:
                fence = m.group(1)[:3]
            elif m.group(1).startswith(fence):
                fence = None
            continue
        if fence is None:
            yield n, line if spans else re.sub(r'(`+)(.+?)\1', '', line)


def anchors(path, cache={}):
    if path not in cache:
        seen, ids = {}, set()
        for _, line in prose_lines(path, spans=True):
            m = re.match(r'^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$', line)
            if not m:
                continue
            base = slug(m.group(2))
            k = seen.get(base, 0)
            seen[base] = k + 1
            ids.add(base if k == 0 else '%s-%d' % (base, k))
        cache[path] = ids
    return cache[path]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('files', nargs='+')
    ap.add_argument('--readme', help='the README whose length and line widths are limited')
    ap.add_argument('--max-lines', type=int, default=300)
    ap.add_argument('--max-width', type=int, default=200)
    a = ap.parse_args()
    passed = failed = 0

    def check(ok, what):
        nonlocal passed, failed
        if ok:
            passed += 1
        else:
            failed += 1
            print('FAIL: ' + what)

    for path in a.files:
        here = os.path.dirname(path)
        for n, line in prose_lines(path):
            for m in LINK.finditer(line):
                target = m.group(2)
                where = '%s:%d: link %s' % (path, n, target)
                if not target or re.match(r'^[a-z][a-z0-9+.-]*:', target, re.I):
                    continue  # another site, mail: not checked here
                file, _, anchor = target.partition('#')
                dest = os.path.normpath(os.path.join(here, file)) if file else path
                if not os.path.exists(dest):
                    check(False, where + ': no such file or folder ' + dest)
                    continue
                if anchor and dest.endswith('.md'):
                    check(anchor in anchors(dest), where + ': no heading with the id #%s in %s' % (anchor, dest))
                else:
                    check(not anchor or os.path.isfile(dest), where + ': an anchor in a folder')
    if a.readme:
        lines = open(a.readme, encoding='utf-8').read().split('\n')
        if lines and lines[-1] == '':
            lines.pop()
        check(len(lines) <= a.max_lines, '%s: %d lines, more than %d' % (a.readme, len(lines), a.max_lines))
        for n, line in prose_lines(a.readme, spans=True):
            check(len(line) <= a.max_width, '%s:%d: %d characters outside code, more than %d'
                  % (a.readme, n, len(line), a.max_width))
    print(passed, failed)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
