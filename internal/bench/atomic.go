package bench

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"

	"github.com/ext4io/ext4io"
)

// The page-batch workloads compare three ways a database writes a batch
// of 16 KiB pages with equal durability (each batch ends with fdatasync):
//
//	atomic-N       the batch with File.WriteAtomicBatch, one untorn unit
//	               (atomic-1: the page with File.WriteAtomic), then Datasync
//	doublewrite-N  MySQL's doublewrite buffer: the batch in one write to a
//	               scratch area, Datasync, the pages in place, Datasync
//	plainpage-N    each page with WriteAt (may tear), then Datasync
//
// for N = 1 and 64 pages per batch, one writer. An operation is one
// batch. The raw side does each workload's pattern on the raw window with
// pwrite and flush (atomic-N as plainpage-N: the device has no untorn
// writes of 16 KiB), always in its own window, as the atomic workloads
// move the engine file's blocks. The pages of a batch are distinct and
// random in the file past the scratch area, which the other workloads
// leave unused too so that all three write the same pages. After a
// page-batch workload the volume is formatted again before the next
// prepared one, and the file's extent count goes to Config.Log: an atomic
// write moves every page it writes (a batch to one fresh run).

// opPageBatch writes a batch of pages (pageSpecs says how).
const opPageBatch opKind = 100

// pageSize is the database page the page-batch workloads write.
const pageSize = 16 << 10

// pageMode is how a page-batch workload writes its pages.
type pageMode int

const (
	pageAtomic pageMode = iota
	pageDoublewrite
	pagePlain
)

// pageSpec is a page-batch workload's batch size and mode.
type pageSpec struct {
	batch int
	mode  pageMode
}

var pageSpecs = map[string]pageSpec{
	"atomic-1": {1, pageAtomic}, "atomic-64": {64, pageAtomic},
	"doublewrite-1": {1, pageDoublewrite}, "doublewrite-64": {64, pageDoublewrite},
	"plainpage-1": {1, pagePlain}, "plainpage-64": {64, pagePlain},
}

// pageScratch is the scratch area at the start of the file: room for the
// largest batch.
const pageScratch = 64 * pageSize

func init() {
	for _, n := range []int{1, 64} {
		for _, m := range []struct{ name, title string }{
			{"atomic", "16k page batches of %d, atomic writes + fdatasync"},
			{"doublewrite", "16k page batches of %d, doublewrite buffer"},
			{"plainpage", "16k page batches of %d, plain writes + fdatasync"},
		} {
			allWorkloads = append(allWorkloads, workload{Name: fmt.Sprintf("%s-%d", m.name, n), Title: fmt.Sprintf(m.title, n),
				Jobs: 1, IOSize: pageSize * n, Prep: prepWritten, Op: opPageBatch, Direct: true})
		}
	}
	workloadPairs = append(workloadPairs,
		[2]string{"atomic-64", "doublewrite-64"}, [2]string{"atomic-1", "doublewrite-1"},
		[2]string{"atomic-64", "plainpage-64"}, [2]string{"atomic-1", "plainpage-1"})
}

// pageBatch writes one batch of w's pages on s: buf holds the batch
// (w.IOSize bytes), the pages at distinct random places past the scratch
// area.
func (r *benchRun) pageBatch(s side, w workload, rng *rand.Rand, buf []byte) error {
	spec := pageSpecs[w.Name]
	pages := (r.region - pageScratch) / pageSize
	offs := make([]int64, 0, spec.batch)
	for len(offs) < spec.batch {
		off := pageScratch + rng.Int64N(pages)*pageSize
		if !slices.Contains(offs, off) {
			offs = append(offs, off)
		}
	}
	write, datasync := s.WriteAt, s.Sync
	if e, ok := s.(engineSide); ok {
		datasync = e.f.Datasync
		if spec.mode == pageAtomic && spec.batch > 1 {
			ws := make([]ext4io.AtomicWrite, len(offs))
			for i, off := range offs {
				ws[i] = ext4io.AtomicWrite{Off: off, Data: buf[i*pageSize : (i+1)*pageSize]}
			}
			if err := r.writeAtomicBatch(e.f, ws); err != nil {
				return err
			}
			return datasync()
		}
		if spec.mode == pageAtomic {
			write = e.f.WriteAtomic
		}
	}
	if spec.mode == pageDoublewrite {
		if _, err := s.WriteAt(buf, 0); err != nil {
			return err
		}
		if err := datasync(); err != nil {
			return err
		}
	}
	for i, off := range offs {
		if _, err := write(buf[i*pageSize:(i+1)*pageSize], off); err != nil {
			return err
		}
	}
	return datasync()
}

// writeAtomicBatch writes ws with one WriteAtomicBatch, or, when the
// volume's journal cannot take the batch's swap in one transaction (a
// small volume's journal, or old blocks scattered over many leaves), as
// two halves, each untorn: a database that meets ErrUnsupported would do
// the same. The splits are counted for the report.
func (r *benchRun) writeAtomicBatch(f *ext4io.File, ws []ext4io.AtomicWrite) error {
	_, err := f.WriteAtomicBatch(ws)
	if err == nil || !errors.Is(err, ext4io.ErrUnsupported) || len(ws) == 1 {
		return err
	}
	r.atomicSplits.Add(1)
	if err := r.writeAtomicBatch(f, ws[:len(ws)/2]); err != nil {
		return err
	}
	return r.writeAtomicBatch(f, ws[len(ws)/2:])
}

// pageBatchDone logs the extent count of a page-batch workload's file.
func (r *benchRun) pageBatchDone(w workload, eng engineSide) {
	splits := r.atomicSplits.Swap(0)
	if r.cfg.Log == nil || eng.f == nil {
		return
	}
	exts, err := eng.f.Extents()
	if err != nil {
		fmt.Fprintf(r.cfg.Log, "%s: extents: %v\n", w.Name, err)
		return
	}
	fmt.Fprintf(r.cfg.Log, "%s: the %d MiB file has %d extents after the run\n", w.Name, r.region>>20, len(exts))
	if splits > 0 {
		fmt.Fprintf(r.cfg.Log, "%s: %d batches were split in two to fit one journal transaction\n", w.Name, splits)
	}
}
