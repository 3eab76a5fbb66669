#!/bin/bash
# fio.sh runs the same fio jobs on one ext4 image mounted three ways, the
# ext4io mount, fuse2fs and Linux (mount -o loop), alternating the order
# round by round, and prints a Markdown table of medians (docs/fuse.md).
#
#   fusefs/testdata/fio.sh [-r ROUNDS] [-t SECONDS] [-j JOBS] [-p PROFDIR] EXT4IO WORKDIR
#
# EXT4IO is an ext4io binary (go build -o /tmp/ext4io ./cmd/ext4io). Needs
# root, /dev/fuse, fusermount3, fuse2fs, fio, mkfs.ext4, e2fsck, jq. Each
# mount gets a fresh 4 GiB image (mkfs.ext4 defaults) in WORKDIR, and
# e2fsck -fn must pass on it after the unmount. -j picks rows by name
# (comma-separated); -p writes a CPU profile of each ext4io mount there.
set -euo pipefail

rounds=1 runtime=10 only="" profdir=""
while getopts r:t:j:p: o; do
	case $o in
	r) rounds=$OPTARG ;;
	t) runtime=$OPTARG ;;
	j) only=$OPTARG ;;
	p) profdir=$OPTARG ;;
	*) exit 2 ;;
	esac
done
shift $((OPTIND - 1))
[ $# -eq 2 ] || { echo "usage: $0 [-r ROUNDS] [-t SECONDS] [-j JOBS] [-p PROFDIR] EXT4IO WORKDIR" >&2; exit 2; }
ext4io=$(realpath "$1") work=$2
mkdir -p "$work"
work=$(realpath "$work")
img=$work/img mnt=$work/mnt res=$work/results
rm -rf "$res"
mkdir -p "$mnt" "$res"

srvpid=""
cleanup() {
	if mountpoint -q "$mnt"; then
		umount "$mnt" 2>/dev/null || umount -l "$mnt" 2>/dev/null || true
	fi
	if [ -n "$srvpid" ]; then
		kill "$srvpid" 2>/dev/null || true
		wait "$srvpid" 2>/dev/null || true
	fi
	srvpid=""
}
trap cleanup EXIT INT TERM

waitmount() {
	for _ in $(seq 200); do
		grep -q " $mnt " /proc/self/mounts && return 0
		if [ -n "$srvpid" ] && ! kill -0 "$srvpid" 2>/dev/null; then
			echo "mount server exited" >&2
			return 1
		fi
		sleep 0.05
	done
	echo "not mounted after 10 s" >&2
	return 1
}

mountfs() { # fs round
	rm -f "$img"
	truncate -s 4G "$img"
	mkfs.ext4 -q -F "$img"
	case $1 in
	ext4io)
		local prof=()
		[ -n "$profdir" ] && prof=(--cpuprofile "$profdir/ext4io-$2.pprof")
		"$ext4io" mount "${prof[@]}" ${EXT4IO_OPTS:+-o "$EXT4IO_OPTS"} "$img" "$mnt" &
		srvpid=$!
		waitmount
		;;
	fuse2fs)
		fuse2fs -f "$img" "$mnt" >/dev/null 2>&1 &
		srvpid=$!
		waitmount
		;;
	linux)
		mount -o loop "$img" "$mnt"
		;;
	esac
}

umountfs() {
	if [ -n "$srvpid" ]; then
		fusermount3 -u "$mnt"
		wait "$srvpid"
		srvpid=""
	else
		umount "$mnt"
	fi
	e2fsck -fn "$img" >"$work/fsck.out" 2>&1 || { echo "e2fsck after $1:" >&2; cat "$work/fsck.out" >&2; exit 1; }
}

# Rows: name, unit, fio arguments. 4k rows report IOPS, 1M rows MiB/s,
# the small-file row files/s (each file is one 4 KiB write and an fsync).
rows=(
	"randread-4k-16j-direct|IOPS|--name=r --filename=rand.dat --rw=randread --bs=4k --numjobs=16 --direct=1 TIMED"
	"randread-4k-16j-buffered|IOPS|--name=r --filename=rand.dat --rw=randread --bs=4k --numjobs=16 TIMED"
	"randread-4k-2j-direct|IOPS|--name=r --filename=rand.dat --rw=randread --bs=4k --numjobs=2 --direct=1 TIMED"
	"randread-4k-2j-buffered|IOPS|--name=r --filename=rand.dat --rw=randread --bs=4k --numjobs=2 TIMED"
	"randwrite-4k-16j-direct|IOPS|--name=w --filename=rand.dat --rw=randwrite --bs=4k --numjobs=16 --direct=1 TIMED"
	"randwrite-4k-16j-buffered|IOPS|--name=w --filename=rand.dat --rw=randwrite --bs=4k --numjobs=16 --end_fsync=1 TIMED"
	"randwrite-4k-2j-direct|IOPS|--name=w --filename=rand.dat --rw=randwrite --bs=4k --numjobs=2 --direct=1 TIMED"
	"randwrite-4k-2j-buffered|IOPS|--name=w --filename=rand.dat --rw=randwrite --bs=4k --numjobs=2 --end_fsync=1 TIMED"
	"seqwrite-1m|MiB/s|--name=sw --filename=seq.dat --rw=write --bs=1m --size=1g --end_fsync=1"
	"seqread-1m|MiB/s|--name=sr --filename=seq.dat --rw=read --bs=1m --size=1g"
	"smallfiles-fsync|files/s|--name=sf --directory=small --rw=write --bs=4k --filesize=4k --nrfiles=2000 --openfiles=1 --create_on_open=1 --file_service_type=sequential --fsync=1 --size=8000k"
)

runrows() { # fs round
	cd "$mnt"
	# The random rows share one 512 MiB file, written once here.
	fio --name=prep --filename=rand.dat --rw=write --bs=1m --size=512m --end_fsync=1 --output=/dev/null
	mkdir -p small
	for row in "${rows[@]}"; do
		IFS='|' read -r name unit args <<<"$row"
		args=${args//TIMED/--size=512m --time_based --runtime=$runtime}
		if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then
			continue
		fi
		# shellcheck disable=SC2086
		fio $args --ioengine=psync --group_reporting \
			--output-format=json --output="$res/$1-$2-$name.json" >/dev/null
		if [ "$name" = smallfiles-fsync ]; then
			rm -rf small && mkdir small
		fi
	done
	cd /
}

value() { # json unit
	case $2 in
	IOPS) jq '[.jobs[0].read.iops, .jobs[0].write.iops] | add' "$1" ;;
	MiB/s) jq '([.jobs[0].read.bw_bytes, .jobs[0].write.bw_bytes] | add) / 1048576' "$1" ;;
	files/s) jq '.jobs[0].write.iops' "$1" ;;
	esac
}

# FSS="ext4io linux" leaves out the others; EXT4IO_OPTS are -o options for ext4io mount.
read -r -a fss <<<"${FSS:-ext4io fuse2fs linux}"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$rounds"); do
	for i in 0 1 2; do
		[ "$i" -lt ${#fss[@]} ] || continue
		fs=${fss[$(((i + r - 1) % ${#fss[@]}))]}
		echo "round $r: $fs" >&2
		mountfs "$fs" "$r"
		runrows "$fs" "$r"
		umountfs "$fs"
	done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

median() { sort -g | awk '{a[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) printf "%.0f\n", a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'; }
echo "| job | unit | ext4io | fuse2fs | Linux | ext4io/fuse2fs | ext4io/Linux |"
echo "|---|---|---|---|---|---|---|"
for row in "${rows[@]}"; do
	IFS='|' read -r name unit _ <<<"$row"
	if [ -n "$only" ] && [[ ",$only," != *",$name,"* ]]; then
		continue
	fi
	declare -A v=()
	for fs in ext4io fuse2fs linux; do
		v[$fs]=$(for f in "$res/$fs"-*-"$name.json"; do if [ -e "$f" ]; then value "$f" "$unit"; fi; done | median)
	done
	ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'; }
	printf "| %s | %s | %s | %s | %s | %s | %s |\n" "$name" "$unit" "${v[ext4io]}" "${v[fuse2fs]}" "${v[linux]}" \
		"$(ratio "${v[ext4io]}" "${v[fuse2fs]}")" "$(ratio "${v[ext4io]}" "${v[linux]}")"
done
