#!/usr/bin/env bash
# Runs commands as a new user would on a fresh, minimal Debian 12: a root
# made by `debootstrap --variant=minbase bookworm` (no procps, no
# ca-certificates, no compiler: less than Debian's official container image
# has), holding a clone of this repository's HEAD, entered with chroot as
# root. It is what CI proves the README's two commands on, so that a program
# that setup.sh does not install fails CI instead of a user's first run.
#
#   usage: tools/setup/fresh_debian.sh ROOT [COMMAND...]
#     ROOT     a folder to make the root in (it must not exist; it is removed
#              at the end unless FERRY_FRESH_KEEP=1)
#     COMMAND  run by bash in the clone (/root/ferry); default:
#              tools/setup/run_demo.sh && tools/setup/run_tests.sh
#
# From this machine the root takes its apt configuration (/etc/apt: the
# sources and their settings), its name resolution (/etc/resolv.conf, and
# /etc/hosts, which an installed Debian always has and debootstrap does not
# write: without it every mpirun waits 5 s for a DNS answer about the
# machine's own name, 2-3 minutes over the suite) and its CA bundle (/etc/ssl/certs/ca-certificates.crt, installed as a local
# CA, so a network that inspects TLS is trusted there as here), nothing
# else; the commands run with an empty environment but for HOME, PATH and
# the proxy variables. The root is bind-mounted on itself (so that "/" is a
# mount point there), /proc, /sys and /dev are bind-mounted into it for the
# run, and all of it is unmounted whatever happens. Needs root and
# debootstrap (apt-get install debootstrap). Exit status: the command's, or
# 1 when the root could not be made (said on stderr).
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || { sed -n 's/^#   //p' "${BASH_SOURCE[0]}" >&2; exit 2; }
root=$1
shift
cmd=${*:-tools/setup/run_demo.sh && tools/setup/run_tests.sh}
say() { echo "fresh_debian: $*" >&2; }

[ "$(id -u)" -eq 0 ] || { say "chroot and debootstrap need root; run it as root"; exit 1; }
command -v debootstrap >/dev/null || { say "debootstrap is not installed: apt-get install debootstrap"; exit 1; }
[ ! -e "$root" ] || { say "'$root' already exists; give a new folder (the root is made fresh each time)"; exit 1; }
git -C "$src" rev-parse --verify -q HEAD >/dev/null || { say "'$src' is not a git clone with a commit to copy"; exit 1; }

# The Debian mirror of this machine's sources (deb822 or one-line format),
# for debootstrap; deb.debian.org where none is named.
mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list 2>/dev/null |
  awk '/^URIs:/ { for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) { print $i; exit } }
       /^deb / { for (i = 2; i <= NF; i++) if ($i ~ /^https?:.*\/debian\/?$/) { print $i; exit } }' || true)
mirror=${mirror:-http://deb.debian.org/debian}

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
    umount -R "${mounted[i]}" 2>/dev/null || umount -lR "${mounted[i]}" 2>/dev/null ||
      say "could not unmount '${mounted[i]}': unmount it by hand before removing '$root'"
  done
  if [ "${FERRY_FRESH_KEEP:-0}" != 1 ] && ! findmnt -rn -o TARGET | grep -q "^$(realpath -m "$root")/"; then
    rm -rf --one-file-system "$root"
  fi
}
trap cleanup EXIT

start=$SECONDS
say "debootstrap --variant=minbase bookworm $root ($mirror)"
if ! debootstrap --variant=minbase bookworm "$root" "$mirror" >"$root.debootstrap.log" 2>&1; then
  tail -20 "$root.debootstrap.log" >&2
  say "debootstrap failed (the whole log: $root.debootstrap.log)"
  exit 1
fi
rm -f "$root.debootstrap.log"
say "the minimal root is made ($((SECONDS - start)) s)"

# This machine's apt sources and settings, name resolution and CA bundle.
rm -f "$root"/etc/apt/sources.list
cp -a /etc/apt/. "$root/etc/apt/"
cp -L /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
cp -L /etc/hosts "$root/etc/hosts" 2>/dev/null || true
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  mkdir -p "$root/usr/local/share/ca-certificates" "$root/etc/ssl/certs"
  cp /etc/ssl/certs/ca-certificates.crt "$root/usr/local/share/ca-certificates/this-machine.crt"
  cp /etc/ssl/certs/ca-certificates.crt "$root/etc/ssl/certs/ca-certificates.crt"
fi
git clone -q --no-hardlinks "$src" "$root/root/ferry"

# The root is a mount point of its own, private, so that inside the chroot
# "/" is one, as on a machine (`unshare -m`, which the tests' full-disk
# cases use, makes "/" private and fails in a chroot whose root is not);
# /proc, /sys and /dev are bound below it and go with it at the end.
mount --bind "$root" "$root"
mounted+=("$root")
mount --make-private "$root"
for fs in proc sys dev; do
  mkdir -p "$root/$fs"
  mount --rbind "/$fs" "$root/$fs"
  mount --make-rslave "$root/$fs"
done

env_args=(HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8)
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY; do
  [ -z "${!v:-}" ] || env_args+=("$v=${!v}")
done
say "running in the fresh root: $cmd"
set +e
chroot "$root" /usr/bin/env -i "${env_args[@]}" /bin/bash -c "cd /root/ferry && $cmd"
rc=$?
set -e
say "the command ended with status $rc after $((SECONDS - start)) s in all"
exit $rc
