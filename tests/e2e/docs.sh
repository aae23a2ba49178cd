#!/usr/bin/env bash
# The documentation as GitHub shows it (tests/e2e/docs_check.py): every relative link of README.md,
# docs/*.md and the other pages they lead to names a file that exists, every #anchor a heading of
# its page; the README holds at most 300 lines, none over 200 characters outside code blocks.
# First the checker must catch a broken link, a missing anchor and an overlong README made here.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/checks.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
CHECK=(/usr/bin/python3 tests/e2e/docs_check.py)

# The checker fails where it should, and names each problem.
mkdir -p "$tmp/docs"
printf '# Page\n\n## Web page: the `inspector`\n\ntext\n' >"$tmp/docs/page.md"
{
    echo '# Broken'
    echo 'Fine: [a page](docs/page.md), [its heading](docs/page.md#web-page-the-inspector), [code](`x`).'
    echo 'Missing: [nothing](docs/none.md). Bad anchor: [here](#no-such-heading), [there](docs/page.md#web-page).'
    echo '```'
    echo '[in a code block](docs/none.md) is not a link'
    echo '```'
    printf '%0.s-' $(seq 1 201); echo
    for i in $(seq 1 300); do echo "line $i"; done
} >"$tmp/README.md"
out=$("${CHECK[@]}" --readme "$tmp/README.md" "$tmp/README.md" 2>&1); rc=$?
expect_eq "a broken set fails" "$rc" 1
expect_in "missing file named" "link docs/none.md: no such file" "$out"
expect_in "missing anchor named" "link #no-such-heading: no heading" "$out"
expect_in "anchor of another page" "link docs/page.md#web-page: no heading" "$out"
expect_in "README too long" "more than 300" "$out"
expect_in "line too wide" "README.md:7: 201 characters" "$out"
expect_eq "only those five" "$(grep -c '^FAIL' <<<"$out")" 5
expect_eq "five failures counted" "$(tail -n 1 <<<"$out" | cut -d' ' -f2)" 5

# The project's pages.
pages=(README.md docs/*.md models/README.md bench/results/*.md)
out=$("${CHECK[@]}" --readme README.md "${pages[@]}" 2>&1); rc=$?
grep '^FAIL' <<<"$out"
read -r p f < <(tail -n 1 <<<"$out")
if [[ "$p" =~ ^[0-9]+$ && "$f" =~ ^[0-9]+$ ]]; then
    pass=$((pass + p)); fail=$((fail + f))
    [ "$p" -gt 100 ] && ok || bad "only $p links checked in ${pages[*]}"
else
    bad "docs_check.py gave no counts: $out"
fi
expect_eq "docs_check.py exit status" "$rc" "$([ "${f:-1}" = 0 ] && echo 0 || echo 1)"

echo "docs: $pass passed, $fail failed"
[ $fail -eq 0 ]
