#!/usr/bin/env bash
# The library as its users get it: `make install` into a temporary prefix (and a staged one with
# DESTDIR), then the examples built against the installed files alone through
# `pkg-config --cflags --libs nucleus`, run; the shared library's soname and exports; the
# installed binary finding the installed default model from any directory.
set -u
cd "$(dirname "$0")/../.."
. tests/lib/checks.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
finish() { echo "install: $pass passed, $fail failed"; [ $fail -eq 0 ]; exit; }
for tool in pkg-config readelf nm; do
    command -v $tool >/dev/null || { bad "$tool is needed (make test-deps)"; finish; }
done

prefix=$tmp/prefix
if make -s install PREFIX="$prefix" >"$tmp/make.log" 2>&1; then ok; else bad "make install: $(tail -n 20 "$tmp/make.log")"; finish; fi
for f in bin/nucleus lib/libnucleus.so lib/libnucleus.so.0 lib/libnucleus.a include/nucleus.h lib/pkgconfig/nucleus.pc \
         share/nucleus/stories260K.gguf share/nucleus/README.md share/doc/nucleus/LICENSE; do
    [ -e "$prefix/$f" ] && ok || bad "make install did not install $f"
done
so=$prefix/lib/libnucleus.so
expect_eq "soname" "$(readelf -d "$so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')" "libnucleus.so.0"
expect_eq "libnucleus.so.0 links to the library" "$(readlink "$prefix/lib/libnucleus.so.0")" "$(basename "$(readlink -f "$so")")"
# Exports: the functions nucleus.h declares, nothing else.
exports=$(nm -D --defined-only "$so" | awk '{print $3}' | sort)
expect_eq "exports outside nc_*" "$(grep -v '^nc_' <<<"$exports")" ""
declared=$(grep -oE '\bnc_[a-z0-9_]+\(' include/nucleus.h | tr -d '(' | sort -u)
expect_eq "every nc_ function of nucleus.h exported, and only those" "$exports" "$declared"
expect_eq "installed header" "$(cmp "$prefix/include/nucleus.h" include/nucleus.h && echo same)" same

# What a user of the library does: the examples, compiled and linked by pkg-config's flags alone.
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
expect_eq "pkg-config --modversion" "$(pkg-config --modversion nucleus)" "$(sed -n 's/^VERSION *:= *//p' Makefile)"
flags=$(pkg-config --cflags --libs nucleus)
expect_in "pkg-config flags" "-I$prefix/include" "$flags"
for ex in generate chat; do
    if cc -std=c11 -Wall -Wextra -Werror -o "$tmp/$ex" "examples/$ex.c" $flags 2>"$tmp/$ex.log"; then ok
    else bad "examples/$ex.c does not build with pkg-config's flags: $(cat "$tmp/$ex.log")"; fi
done
export LD_LIBRARY_PATH=$prefix/lib
expect_in "generate uses the installed library" "$so.0" "$(ldd "$tmp/generate")"
MODEL=$prefix/share/nucleus/stories260K.gguf
# generate is greedy: its text is the installed command's greedy text.
want=$("$prefix/bin/nucleus" run -m "$MODEL" -p "Once upon a time" -n 64 --temp 0 2>/dev/null)
got=$("$tmp/generate" "$MODEL" "Once upon a time" 2>"$tmp/gen.err"); rc=$?
expect_eq "generate exit status" "$rc" 0
[ ${#got} -gt 40 ] && ok || bad "generate wrote too little: $got $(cat "$tmp/gen.err")"
expect_eq "generate's text is run's" "$got" "$want"
expect_err "generate on a missing model" "nope.gguf" "$tmp/generate" "$tmp/nope.gguf" "x"
# chat: two turns from stdin, each answered, then end of input ends it.
out=$(printf 'Tell me a story.\nAnd then?\n' | "$tmp/chat" "$MODEL" 2>"$tmp/chat.err"); rc=$?
expect_eq "chat exit status" "$rc" 0
expect_eq "chat prompts (two turns and the end)" "$(grep -o '> ' <<<"$out" | wc -l)" 3
[ "$(tr -d '> \n' <<<"$out" | wc -c)" -gt 20 ] && ok || bad "chat replied nothing: [$out] $(cat "$tmp/chat.err")"
unset LD_LIBRARY_PATH

# The static library links the same program.
if cc -std=c11 -o "$tmp/generate_static" examples/generate.c -I"$prefix/include" "$prefix/lib/libnucleus.a" \
      $(pkg-config --libs-only-l --static nucleus | sed 's/-lnucleus//') 2>"$tmp/static.log"; then
    expect_eq "static generate's text" "$("$tmp/generate_static" "$MODEL" "Once upon a time" 2>/dev/null)" "$want"
    expect_eq "static generate needs no libnucleus.so" "$(ldd "$tmp/generate_static" | grep -c libnucleus)" 0
else
    bad "generate does not link with libnucleus.a: $(cat "$tmp/static.log")"
fi

# The installed binary finds the installed model from anywhere.
expect_eq "installed nucleus without -m" "$(cd / && "$prefix/bin/nucleus" run -p "Once upon a time" -n 64 --temp 0 2>/dev/null)" "$want"

# DESTDIR stages the same tree for a package, with the final prefix written into nucleus.pc.
if make -s install PREFIX=/opt/nc DESTDIR="$tmp/stage" >"$tmp/stage.log" 2>&1; then ok; else bad "make install DESTDIR: $(tail -n 20 "$tmp/stage.log")"; fi
[ -x "$tmp/stage/opt/nc/bin/nucleus" ] && [ -e "$tmp/stage/opt/nc/lib/libnucleus.so.0" ] && ok || bad "DESTDIR: files not under $tmp/stage/opt/nc"
expect_eq "DESTDIR: nucleus.pc's prefix" "$(sed -n 's/^prefix=//p' "$tmp/stage/opt/nc/lib/pkgconfig/nucleus.pc")" /opt/nc
finish
