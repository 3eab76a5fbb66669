package ext4io

import (
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fragment makes [from, to) blocks of f one extent a block: preallocated,
// every other block written.
func fragment(t *testing.T, f *File, from, to int64) {
	require.NoError(t, f.Fallocate(FallocKeepSize, from*1024, (to-from)*1024))
	b := make([]byte, 1024)
	for i := from; i < to; i += 2 {
		_, err := f.WriteAt(b, i*1024)
		require.NoError(t, err)
	}
}

// smallLogFile formats mem with 1 KiB blocks and a 1024-block journal
// (one transaction holds about a thousand metadata blocks), opens it
// writable without a page cache and creates f, made of n one-block
// extents (fragment) with a byte past them, synced.
func smallLogFile(t *testing.T, mem *memdev.Device, n int64) (*Volume, *File) {
	t.Helper()
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	fragment(t, f, 0, n)
	_, err = f.WriteAt([]byte{1}, n*1024)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
	return v, f
}

// TestRemoveStepsMappingGrows writes, between two steps of a stepped
// truncate and of a stepped punch, more one-block extents into what the
// next steps, or the final operation, remove (past the cuts the steps
// computed) than the whole log holds in
// one transaction. Steps that followed the cuts computed before the
// writes freed all of that in one operation: the log refused it
// (ErrNoSpace) and the volume stopped. The steps compute their cuts again
// once the mapping changed.
func TestRemoveStepsMappingGrows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name         string
		punch, final bool // punch, not truncate; grow after the last step
	}{{"truncate", false, false}, {"truncate-final", false, true}, {"punch", true, false}, {"punch-final", true, true}} {
		punch := tc.punch
		t.Run(tc.name, func(t *testing.T) {
			mem := memdev.NewBlockSize(256<<20, 1024)
			require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
			v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
			require.NoError(t, err)
			f, err := v.Create("f")
			require.NoError(t, err)
			const small, big = 2 * 84 * 60, 2 * 84 * 700
			fragment(t, f, 0, small)
			if punch {
				_, err := f.WriteAt(make([]byte, 1024), (small+big)*1024)
				require.NoError(t, err)
			}
			require.NoError(t, v.Sync())
			hooked, steps := 0, 0
			v.stepHook = func(done bool) {
				steps++
				if done != tc.final || hooked > 0 || steps < 2 && !tc.final {
					return
				}
				hooked++
				fragment(t, f, small, small+big) // past the cuts computed
			}
			if punch {
				require.NoError(t, f.Fallocate(FallocPunchHole, 1024, (small+big-1)*1024))
			} else {
				require.NoError(t, f.Truncate(1024))
			}
			require.Equal(t, 1, hooked)
			require.Greater(t, steps, 2, "the removal ran in steps")
			require.NoError(t, f.CheckTree())
			exts, err := f.Extents()
			require.NoError(t, err)
			assert.LessOrEqual(t, len(exts), 2)
			require.NoError(t, f.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, mem)
		})
	}
}

// TestTruncateDeepTreeSmallFree shrinks a file whose tree is deep by a
// few blocks: one operation frees them, as before steps existed.
func TestTruncateDeepTreeSmallFree(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(256<<20, 1024)
	const n = 2 * 84 * 300
	v, f := smallLogFile(t, mem, n)
	require.Positive(t, f.m.tree.Depth())
	var ops []bool
	v.stepHook = func(done bool) { ops = append(ops, done) }
	require.NoError(t, f.Truncate((n-40)*1024))
	assert.Equal(t, []bool{true}, ops, "one operation looked, none stepped")
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}

// TestTruncateStepsSecondTruncate truncates the file to zero, and then
// grows it, from between two steps of a stepped truncate: the first
// truncate ends the steps and sets its size last.
func TestTruncateStepsSecondTruncate(t *testing.T) {
	t.Parallel()
	mem := memdev.NewBlockSize(256<<20, 1024)
	const n = 2 * 84 * 300
	v, f := smallLogFile(t, mem, n)
	steps := 0
	v.stepHook = func(bool) {
		if steps++; steps == 2 {
			require.NoError(t, f.Truncate(0))
			require.NoError(t, f.Truncate(1<<30))
		}
	}
	require.NoError(t, f.Truncate(5000))
	require.Greater(t, steps, 2)
	assert.Equal(t, int64(5000), f.Size())
	exts, err := f.Extents()
	require.NoError(t, err)
	assert.Empty(t, exts)
	require.NoError(t, f.Close())
	require.NoError(t, v.Close())
	ext4iotest.FsckDev(t, mem)
}

// TestTruncateStepsRacing runs stepped truncates and punches of a file
// while other goroutines append fragmented blocks to it (1500), read it, fsync it
// (fast commits on), write atomically and rename it, under -race: no
// operation fails for lack of log space, every tree checks and e2fsck
// accepts the image.
func TestTruncateStepsRacing(t *testing.T) {
	t.Parallel()
	for _, bs := range []int{1024, 4096} {
		mem := memdev.NewBlockSize(256<<20, bs)
		require.NoError(t, Format(mem, FormatOptions{BlockSize: bs, JournalBlocks: 1024, FastCommit: true}))
		v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
		require.NoError(t, err)
		f, err := v.Create("f")
		require.NoError(t, err)
		b := int64(bs)
		const n = 2 * 84 * 200
		require.NoError(t, f.Fallocate(FallocKeepSize, 0, n*b))
		p := make([]byte, b)
		for i := int64(0); i < n; i += 2 {
			_, err := f.WriteAt(p, i*b)
			require.NoError(t, err)
		}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		run := func(fn func(i int64) error) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int64(0); ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					if err := fn(i); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		run(func(i int64) error { // fragmented appends
			// A fixed number: the truncate's steps cut what the appends
			// add past its size, so endless appends keep it stepping.
			if i == 1500 {
				<-stop
				return nil
			}
			off := (n + i%4000*2) * b
			if err := f.Fallocate(FallocKeepSize, off, 2*b); err != nil {
				return err
			}
			_, err := f.WriteAt(p, off)
			return err
		})
		run(func(i int64) error {
			if _, err := f.ReadAt(make([]byte, b), i%n*b); err != nil && err != io.EOF {
				return err
			}
			return nil
		})
		run(func(i int64) error {
			if i%2 == 0 {
				return f.Sync()
			}
			return f.Datasync()
		})
		run(func(i int64) error {
			_, err := f.WriteAtomic(make([]byte, b), i%64*b)
			return err
		})
		run(func(i int64) error {
			from, to := "f", "g"
			if i%2 == 1 {
				from, to = to, from
			}
			return v.Rename(from, to)
		})
		var steps atomic.Int64
		v.stepHook = func(done bool) {
			if !done {
				steps.Add(1)
			}
		}
		for i := range 4 {
			if i%2 == 0 {
				require.NoError(t, f.Truncate(b))
			} else {
				require.NoError(t, f.Fallocate(FallocPunchHole, b, f.Size()))
			}
		}
		close(stop)
		wg.Wait()
		assert.Positive(t, steps.Load(), "steps ran")
		require.NoError(t, f.CheckTree())
		require.NoError(t, f.Close())
		require.NoError(t, v.Close())
		ext4iotest.FsckDev(t, mem)
	}
}
