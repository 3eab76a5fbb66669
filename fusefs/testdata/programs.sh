#!/bin/bash
# programs.sh runs real programs on an ext4 image mounted by ext4io and,
# for comparison, by Linux (mount -o loop), at the same mount point, and
# checks that they leave the same results (docs/fuse.md):
#
#   untar  tar -xf of /usr/local/go (without test/, about 250 MB)
#   build  the Go toolchain on the mount builds cmd/gofmt from the tree on
#          the mount (GOROOT and GOCACHE on the mount)
#   git    git init, add, commit (fixed author and dates), status, log, fsck
#          of a copy of go/src/net
#   rsync  rsync -a of the whole mount back out to WORKDIR
#
# then compares the two rsync'd trees (diff -r, modes and sizes, the
# untarred tree's mtimes), the gofmt binaries and the commit hashes, and
# runs e2fsck -fn on each image after its unmount.
#
#   fusefs/testdata/programs.sh EXT4IO WORKDIR
#
# Needs root, /dev/fuse, fusermount3, tar, git, rsync, mkfs.ext4, e2fsck
# and /usr/local/go.
set -euo pipefail

[ $# -eq 2 ] || { echo "usage: $0 EXT4IO WORKDIR" >&2; exit 2; }
ext4io=$(realpath "$1") work=$2
mkdir -p "$work"
work=$(realpath "$work")
mnt=$work/mnt
mkdir -p "$mnt"

srvpid=""
cleanup() {
	if mountpoint -q "$mnt"; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
	if [ -n "$srvpid" ]; then
		kill "$srvpid" 2>/dev/null || true
		wait "$srvpid" 2>/dev/null || true
	fi
}
trap cleanup EXIT INT TERM

tarball=$work/go.tar
[ -s "$tarball" ] || tar -C /usr/local -cf "$tarball" --exclude=go/test go

t() { # label command...: runs the command, prints its seconds
	local s e
	s=$(date +%s.%N)
	"${@:2}"
	e=$(date +%s.%N)
	awk -v l="$1" -v s="$s" -v e="$e" 'BEGIN { printf "%s %.1f\n", l, e - s }' >>"$work/times-$fs"
}

steps() {
	cd "$mnt"
	t untar tar -xf "$tarball"
	t build env GOROOT="$mnt/go" GOCACHE="$mnt/gocache" GOTOOLCHAIN=local GOFLAGS= GO111MODULE= \
		"$mnt/go/bin/go" build -o "$mnt/gofmt" cmd/gofmt
	cp -a "$mnt/go/src/net" "$mnt/repo"
	cd "$mnt/repo"
	export GIT_AUTHOR_NAME=a GIT_AUTHOR_EMAIL=a@example.com GIT_COMMITTER_NAME=a GIT_COMMITTER_EMAIL=a@example.com
	export GIT_AUTHOR_DATE="2026-01-01T00:00:00Z" GIT_COMMITTER_DATE="2026-01-01T00:00:00Z"
	t git bash -c 'git init -q -b main . && git add -A && git commit -qm net && echo change >>http/server.go &&
		git status --porcelain >../git-status && git log --format="%H %s" >../git-log && git fsck --no-progress 2>&1 | tee ../git-fsck'
	cd /
	rm -rf "$work/out-$fs"
	t rsync rsync -a "$mnt/" "$work/out-$fs/"
}

rm -f "$work"/times-*
for fs in ext4io linux; do
	echo "== $fs" >&2
	rm -f "$work/img"
	truncate -s 4G "$work/img"
	mkfs.ext4 -q -F "$work/img"
	if [ $fs = ext4io ]; then
		"$ext4io" mount "$work/img" "$mnt" &
		srvpid=$!
		for _ in $(seq 200); do
			grep -q " $mnt " /proc/self/mounts && break
			sleep 0.05
		done
	else
		mount -o loop "$work/img" "$mnt"
	fi
	steps
	if [ $fs = ext4io ]; then
		fusermount3 -u "$mnt"
		wait "$srvpid" # it closes the volume after the unmount
		srvpid=""
	else
		umount "$mnt"
	fi
	e2fsck -fn "$work/img" >"$work/fsck-$fs" 2>&1 || { echo "e2fsck after $fs:" >&2; cat "$work/fsck-$fs" >&2; exit 1; }
	echo "e2fsck -fn after $fs: clean" >&2
done

cd "$work"
status=0
# The git index records inode numbers and ctimes; the build cache, times.
diff -r -x index -x gocache out-ext4io out-linux || status=1
cmp out-ext4io/gofmt out-linux/gofmt || status=1
cmp out-ext4io/git-log out-linux/git-log || status=1
# Modes of everything, sizes of files (a directory's size on the host
# depends on rsync's temporary names); mtimes of the untarred tree (tar
# and rsync -a keep them).
meta() { (cd "$1" && find . -path ./gocache -prune -o -type d -printf '%p %M\n' -o ! -name index -printf '%p %M %s\n' | sort); }
cmp <(meta out-ext4io) <(meta out-linux) || { echo "modes or sizes differ" >&2; status=1; }
cmp <(cd out-ext4io && find go -printf '%p %T@\n' | sort) <(cd out-linux && find go -printf '%p %T@\n' | sort) ||
	{ echo "mtimes under go/ differ" >&2; status=1; }
echo "files: $(find out-ext4io -path out-ext4io/gocache -prune -o -type f -print | wc -l), commit $(cut -d' ' -f1 out-ext4io/git-log)"
echo "| step | ext4io mount (s) | Linux ext4 (s) | ratio |"
echo "|---|---|---|---|"
paste -d' ' times-ext4io times-linux | awk '{ printf "| %s | %s | %s | %.2f |\n", $1, $2, $4, $2 / $4 }'
[ $status = 0 ] && echo "results identical" || echo "RESULTS DIFFER"
exit $status
