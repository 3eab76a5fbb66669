package bench

import (
	"fmt"
	"strconv"
	"strings"
)

// diskSnap is a snapshot of a host block device's I/O counters: requests
// completed and bytes moved, from every process on the host.
type diskSnap struct {
	Reads, Writes         uint64
	ReadBytes, WriteBytes uint64
}

func (s diskSnap) add(o diskSnap) diskSnap {
	return diskSnap{s.Reads + o.Reads, s.Writes + o.Writes, s.ReadBytes + o.ReadBytes, s.WriteBytes + o.WriteBytes}
}

func (s diskSnap) sub(o diskSnap) diskSnap {
	return diskSnap{s.Reads - o.Reads, s.Writes - o.Writes, s.ReadBytes - o.ReadBytes, s.WriteBytes - o.WriteBytes}
}

// DiskPerOp is a diskSnap per workload operation.
type DiskPerOp struct {
	Reads, Writes         float64
	ReadBytes, WriteBytes float64
}

func diskPer(s diskSnap, ops int64) *DiskPerOp {
	if ops <= 0 {
		return &DiskPerOp{}
	}
	n := float64(ops)
	return &DiskPerOp{float64(s.Reads) / n, float64(s.Writes) / n, float64(s.ReadBytes) / n, float64(s.WriteBytes) / n}
}

// hostDisk reads the I/O counters of the host block device that holds
// the bench's image (Linux: /sys/dev/block/MAJ:MIN/stat). They show
// whether a phase reached the disk: with the file and mmap backends an
// image on disk is read and written through the host's page cache, and
// the device sees only the host's own write-back.
type hostDisk struct {
	name     string // as the report names it, e.g. "vda (253:0)"
	statPath string
	read     func(string) (string, error)
}

// snap reads the counters; ok is false when they cannot be read.
func (h *hostDisk) snap() (diskSnap, bool) {
	if h == nil {
		return diskSnap{}, false
	}
	s, err := h.read(h.statPath)
	if err != nil {
		return diskSnap{}, false
	}
	d, err := parseDiskStat(s)
	return d, err == nil
}

// parseDiskStat decodes a block device's stat file
// (Documentation/block/stat.rst): field 1 is read requests completed,
// 3 sectors read, 5 write requests completed, 7 sectors written, in
// 512-byte sectors whatever the device's block size.
func parseDiskStat(s string) (diskSnap, error) {
	f := strings.Fields(s)
	if len(f) < 7 {
		return diskSnap{}, fmt.Errorf("block device stat: %d fields, want at least 7", len(f))
	}
	var v [7]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			return diskSnap{}, fmt.Errorf("block device stat field %d: %w", i+1, err)
		}
		v[i] = n
	}
	return diskSnap{Reads: v[0], ReadBytes: v[2] * 512, Writes: v[4], WriteBytes: v[6] * 512}, nil
}
