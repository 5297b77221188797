#!/bin/sh
# Make the separate-debug-info fixtures of one test program the way
# distributions ship their binaries:
#
#   OUT/stripped/NAME                   NAME stripped of .symtab and DWARF
#   OUT/root/.build-id/xx/rest.debug    its debug file (objcopy
#                                       --only-keep-debug) where a debug
#                                       root keeps it (Debian's -dbgsym)
#   OUT/linked/NAME                     stripped, with a .gnu_debuglink
#   OUT/linked/.debug/NAME.debug        the file that link names
#   OUT/mini/NAME                       stripped, with only MiniDebugInfo
#                                       (.gnu_debugdata, as Fedora makes it)
#   OUT/NAME.mini.xz                    that section's content
#   OUT/NAME.build-id                   the build-id, hex
#
# usage: debugfix.sh OBJCOPY STRIP NM XZ READELF INPUT OUT NAME
set -eu
objcopy=$1 strip=$2 nm=$3 xz=$4 readelf=$5 in=$6 out=$7 name=$8

tmp=$out/tmp-$name
rm -rf "$tmp"
mkdir -p "$tmp" "$out/stripped" "$out/linked/.debug" "$out/mini"

id=$("$readelf" -n "$in" | sed -n 's/^ *Build ID: *\([0-9a-f]*\)$/\1/p')
[ -n "$id" ] || { echo "debugfix: $in has no build-id" >&2; exit 1; }
printf '%s\n' "$id" >"$out/$name.build-id"
hi=$(printf '%s' "$id" | cut -c1-2)
lo=$(printf '%s' "$id" | cut -c3-)

"$objcopy" --only-keep-debug "$in" "$tmp/debug"
"$strip" --strip-all -o "$out/stripped/$name" "$in"

mkdir -p "$out/root/.build-id/$hi"
cp "$tmp/debug" "$out/root/.build-id/$hi/$lo.debug"

# .gnu_debuglink records the file's base name and CRC32.
cp "$tmp/debug" "$out/linked/.debug/$name.debug"
"$objcopy" --add-gnu-debuglink="$out/linked/.debug/$name.debug" "$out/stripped/$name" \
  "$out/linked/$name"

# MiniDebugInfo: the function symbols .dynsym lacks, in a symbol-only copy
# of the debug file, xz-compressed into .gnu_debugdata.
"$nm" -D --format=posix --defined-only "$in" | awk '{ print $1 }' | sort -u >"$tmp/dynsyms"
"$nm" --format=posix --defined-only "$tmp/debug" |
  awk '$2 == "T" || $2 == "t" { print $1 }' | sort -u >"$tmp/funcsyms"
comm -13 "$tmp/dynsyms" "$tmp/funcsyms" >"$tmp/keep"
"$objcopy" -S --remove-section .gdb_index --remove-section .comment \
  --keep-symbols="$tmp/keep" "$tmp/debug" "$tmp/mini"
"$xz" -c "$tmp/mini" >"$out/$name.mini.xz"
"$objcopy" --add-section .gnu_debugdata="$out/$name.mini.xz" "$out/stripped/$name" \
  "$out/mini/$name"

rm -rf "$tmp"
