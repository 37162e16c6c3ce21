#!/bin/sh
# Run by `meson install` after it copies libferry.so: makes the library
# findable by the loader, so a program built with
# `cc app.c $(pkg-config --cflags --libs ferry)` runs at once. As root, into
# a folder the loader searches (/usr/local/lib/... on Debian), that is
# `ldconfig`; anywhere else it says what to do. A staged install (DESTDIR,
# as packagers use) is left alone: the package's own scripts run ldconfig.
#   usage: post_install.sh LIBDIR
libdir=$1
[ -n "${DESTDIR:-}" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v ldconfig >/dev/null 2>&1; then
  ldconfig
fi
if command -v ldconfig >/dev/null 2>&1 && ldconfig -p 2>/dev/null | grep -q "libferry\.so\.0 .*=> $libdir/libferry\.so\.0\$"; then
  echo "ferry: libferry.so.0 in $libdir is known to the loader"
  exit 0
fi
cat <<MSG
ferry: the loader does not find libferry.so.0 in $libdir yet. Either
  - as root: add $libdir to /etc/ld.so.conf.d/ferry.conf (unless the loader
    searches it already) and run ldconfig;
  - or build programs with -Wl,-rpath,$libdir;
  - or run them with LD_LIBRARY_PATH=$libdir.
MSG
exit 0
