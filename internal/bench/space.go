package bench

// The space plan: what each workload may hold on the engine's filesystem
// at its peak, bounded by design and not by runtime × rate. A sequential
// writer starts its file over (truncate, then a commit so that the freed
// blocks are allocatable again) when it reaches seqBudget; fsync-small
// reuses the names of its first smallFiles files, unlinking the old file
// before creating the new one; the random workloads stay inside the file
// they were prepared with. Fresh-file and prepared workloads get a freshly
// formatted filesystem, so only the largest need has to fit, not the sum.
// The raw side stays inside its region of the same size (its window
// refuses anything outside).

import (
	"fmt"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
)

// spaceMargin is the fraction of the filesystem's free blocks (and
// inodes) one workload may plan to use at its peak.
const spaceMargin = 0.75

// maxPlanTwin caps the in-memory filesystem planSpace formats.
const maxPlanTwin = 16 << 30

// spacePlan is the space budget of a run.
type spacePlan struct {
	DeviceBytes int64 // the bench's device
	Region      int64 // raw region; each workload's file size and wrap point
	FSBytes     int64 // the filesystem's window
	FreeBytes   int64 // free after Format
	FreeInodes  int64 // free after Format
	BlockSize   int64
	SeqBudget   int64 // sequential writers start over at this size
	SmallFiles  int64 // fsync-small reuses names beyond this many files
}

// spaceNeed is one workload's peak on the engine's filesystem.
type spaceNeed struct {
	Bytes  int64 // data and metadata blocks, in bytes
	Inodes int64
}

// planSpace formats a sparse in-memory twin of the filesystem window to
// learn its free space, and sets the budgets from the region.
func planSpace(size, region int64, bs int) (*spacePlan, error) {
	p := &spacePlan{DeviceBytes: size, Region: region, FSBytes: size - region, BlockSize: int64(bs)}
	// A filesystem larger than the twin has more free space, not less:
	// the twin of a big device is capped, so its free space is a lower
	// bound and its metadata stays small in memory.
	dev := memdev.New(min(p.FSBytes, maxPlanTwin))
	if err := ext4io.Format(dev, ext4io.FormatOptions{BlockSize: bs, NoDiscard: true}); err != nil {
		return nil, fmt.Errorf("space plan: format: %w", err)
	}
	v, err := ext4io.Open(dev, ext4io.Options{Writable: true})
	if err != nil {
		return nil, fmt.Errorf("space plan: %w", err)
	}
	st, err := v.Statfs()
	if err != nil {
		v.Close()
		return nil, fmt.Errorf("space plan: %w", err)
	}
	p.FreeBytes, p.FreeInodes = int64(st.BlocksFree)*p.BlockSize, int64(st.FilesFree)
	if err := v.Close(); err != nil {
		return nil, fmt.Errorf("space plan: %w", err)
	}
	p.SeqBudget = region
	// Half the region's worth of blocks, and at most half the inodes.
	p.SmallFiles = max(min(region/p.BlockSize/2, p.FreeInodes/2), 64)
	return p, nil
}

// metaBytes bounds the extent-tree blocks of a file of n bytes: one leaf
// per 128 blocks (a 4 KiB leaf holds 340 extents, 170 when half full,
// which a file split by 4 KiB writes into unwritten extents can reach),
// plus index blocks and slack.
func (p *spacePlan) metaBytes(n int64) int64 {
	return (n/p.BlockSize/128 + 64) * p.BlockSize
}

// smallFileBytes is one fsync-small file's blocks, and its directory
// entry with htree slack.
func (p *spacePlan) smallFileBytes(w workload) int64 {
	return (int64(w.IOSize)+p.BlockSize-1)/p.BlockSize*p.BlockSize + 64
}

// peak returns w's peak on the filesystem after written bytes of engine
// writes (in every phase together), following the workloads' budgets.
// need is peak at an unbounded written.
func (p *spacePlan) peak(w workload, written int64) spaceNeed {
	switch w.Op {
	case opSeqWrite:
		n := min(written, p.SeqBudget)
		return spaceNeed{Bytes: n + p.metaBytes(n), Inodes: 1}
	case opSmallFsync:
		files := min(written/int64(w.IOSize)+1, p.SmallFiles)
		return spaceNeed{Bytes: files*p.smallFileBytes(w) + 64*p.BlockSize, Inodes: files}
	}
	// Random I/O inside the file prepared at the region's size.
	return spaceNeed{Bytes: p.Region + p.metaBytes(p.Region), Inodes: 1}
}

func (p *spacePlan) need(w workload) spaceNeed { return p.peak(w, 1<<62) }

// fits reports whether n stays inside the margin.
func (p *spacePlan) fits(n spaceNeed) bool {
	return float64(n.Bytes) <= spaceMargin*float64(p.FreeBytes) && float64(n.Inodes) <= spaceMargin*float64(p.FreeInodes)
}

// check fails if some workload's need does not fit.
func (p *spacePlan) check(ws []workload) error {
	for _, w := range ws {
		if n := p.need(w); !p.fits(n) {
			return fmt.Errorf("space plan: workload %s needs %d MiB and %d inodes, more than %.0f%% of the filesystem's %d MiB and %d inodes free (use a larger --size)",
				w.Name, n.Bytes>>20, n.Inodes, 100*spaceMargin, p.FreeBytes>>20, p.FreeInodes)
		}
	}
	return nil
}

// summary is the plan's line in the report.
func (p *spacePlan) summary(ws []workload) string {
	var big workload
	var most int64
	for _, w := range ws {
		if n := p.need(w).Bytes; n > most {
			big, most = w, n
		}
	}
	free := gib(p.FreeBytes)
	if p.FSBytes > maxPlanTwin {
		free = "at least " + free
	}
	return fmt.Sprintf("space plan: %d workloads, largest (%s) needs %s, filesystem %s free of %s (image %s, raw region %s); sequential writers start over at %s, fsync-small reuses %d file names",
		len(ws), big.Name, gib(most), free, gib(p.FSBytes), gib(p.DeviceBytes), gib(p.Region), gib(p.SeqBudget), p.SmallFiles)
}

func gib(n int64) string {
	if n >= 1<<30 {
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	}
	return fmt.Sprintf("%d MiB", n>>20)
}
