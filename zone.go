package ext4io

import (
	"fmt"
	"slices"
	"sort"

	"github.com/ext4io/ext4io/alloc"
	"github.com/ext4io/ext4io/extent"
	"github.com/ext4io/ext4io/internal/errs"
	"github.com/ext4io/ext4io/layout"
)

// systemZone is the set of blocks holding file-system metadata, which no
// file may map, as Linux's block_validity keeps it: every group's
// superblock copy, descriptor blocks and reserved GDT blocks, its block
// and inode bitmaps and its inode table, and the blocks of the internal
// journal (which only the journal inode may map). Extent trees and block
// maps consult it as they decode (extent.Config.SystemZone), so a mapping
// into metadata is refused before any read or write goes through it, and
// the allocator's runs are checked before data is written to them.
//
// A systemZone is immutable once built; Open builds it (again after a
// journal replay, which may have changed the descriptors).
type systemZone struct {
	runs []zoneRun // sorted by start, disjoint
}

// zoneRun is one run of metadata blocks, [start, end). ino is the inode
// allowed to map it (the journal inode for the journal's blocks), 0 for
// none.
type zoneRun struct {
	start, end uint64
	ino        uint32
}

// overlaps reports whether [p, p+n) meets a run inode ino may not map.
func (z *systemZone) overlaps(ino uint32, p, n uint64) bool {
	if z == nil || n == 0 {
		return false
	}
	end := p + n
	if end < p {
		return true
	}
	i := sort.Search(len(z.runs), func(i int) bool { return z.runs[i].end > p })
	for ; i < len(z.runs) && z.runs[i].start < end; i++ {
		if r := z.runs[i]; r.ino == 0 || r.ino != ino {
			return true
		}
	}
	return false
}

// add adds the run [start, start+n) owned by ino; finish then sorts and
// merges the runs.
func (z *systemZone) add(start, n uint64, ino uint32) {
	if n > 0 {
		z.runs = append(z.runs, zoneRun{start, start + n, ino})
	}
}

// finish sorts the runs and merges touching or overlapping runs of the
// same owner. Runs of different owners that overlap are reported: the
// journal must not share blocks with group metadata.
func (z *systemZone) finish() error {
	slices.SortFunc(z.runs, func(a, b zoneRun) int {
		switch {
		case a.start < b.start:
			return -1
		case a.start > b.start:
			return 1
		}
		return 0
	})
	out := z.runs[:0]
	for _, r := range z.runs {
		if k := len(out); k > 0 && r.start <= out[k-1].end {
			last := &out[k-1]
			if r.ino != last.ino && r.start < last.end {
				return errs.Corruptf("journal inode", r.start, -1, "blocks [%d,%d) overlap file-system metadata [%d,%d)",
					r.start, r.end, last.start, last.end)
			}
			if r.ino == last.ino {
				last.end = max(last.end, r.end)
				continue
			}
		}
		out = append(out, r)
	}
	z.runs = out
	return nil
}

// allocate allocates blocks as v.alloc.Allocate does and refuses a run
// that overlaps the system zone, which only a block bitmap that lies
// offers: ErrCorrupt, and the run stays marked in use (it is), as
// Linux's ext4_mb_mark_diskspace_used refuses "blocks which overlap fs
// metadata".
func (v *Volume) allocate(req alloc.Request) (start, got uint64, err error) {
	start, got, err = v.alloc.Allocate(req)
	if err == nil && v.zone.overlaps(0, start, got) {
		return 0, 0, errs.Corruptf("block bitmap", 0, -1, "allocated blocks [%d,+%d) overlap file-system metadata", start, got)
	}
	return start, got, err
}

// buildZone builds the volume's system zone from the group descriptors
// and the journal inode's mapping.
func (v *Volume) buildZone() error {
	sb := v.sb
	z := &systemZone{}
	itb := (uint64(sb.InodesPerGroup)*uint64(sb.InodeSizeBytes()) + uint64(v.bs) - 1) / uint64(v.bs)
	for g, gd := range v.groups {
		z.add(sb.GroupFirstBlock(uint64(g)), layout.GroupBaseBlocks(sb, uint64(g)), 0)
		z.add(gd.BlockBitmap, 1, 0)
		z.add(gd.InodeBitmap, 1, 0)
		z.add(gd.InodeTable, itb, 0)
	}
	if err := z.finish(); err != nil {
		return err
	}
	// The journal inode's mapping is decoded against the zone built so
	// far: its blocks must not overlap group metadata.
	v.zone = z
	ji := sb.JournalInum
	if ji == 0 || sb.JournalDev != 0 || !sb.HasCompat(layout.CompatHasJournal) {
		return nil
	}
	full, err := v.journalZone(z, ji)
	if err != nil {
		// Like Linux, which refuses to mount then. A read-only volume
		// whose journal needs no replay does not use the journal: it
		// opens without the journal's blocks in the zone, so that data
		// can still be read from a volume whose journal inode is broken.
		if v.opts.Writable || v.opts.Replay || sb.HasIncompat(layout.IncompatRecover) {
			return err
		}
		return nil
	}
	v.zone = full
	return nil
}

// journalZone returns z with the blocks of journal inode ji added.
func (v *Volume) journalZone(z *systemZone, ji uint32) (*systemZone, error) {
	n, err := v.getInode(ji)
	if err != nil {
		return nil, fmt.Errorf("ext4io: journal inode %d: %w", ji, err)
	}
	full := &systemZone{runs: slices.Clone(z.runs)}
	if n.m != nil {
		err := n.m.walk(func(e extent.Extent) error {
			full.add(e.Pblk, uint64(e.Len), ji)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("ext4io: journal inode %d: %w", ji, err)
		}
	}
	if err := full.finish(); err != nil {
		return nil, err
	}
	return full, nil
}
