package ext4io

import (
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

// TestRemoveStepsMappingGrows writes, between two steps of a stepped
// truncate and of a stepped punch, more one-block extents into what the
// next steps, or the final operation, remove (past the cuts the steps
// computed) than the whole log holds in
// one transaction. Steps that followed the cuts computed before the
// writes freed all of that in one operation: the log refused it
// (ErrNoSpace) and the volume stopped. The steps compute their cuts again
// once the mapping changed.
func TestRemoveStepsMappingGrows(t *testing.T) {
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
			const small, big = 2 * 84 * 60, 2 * 84 * 1100
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
	mem := memdev.NewBlockSize(256<<20, 1024)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	const n = 2 * 84 * 300
	fragment(t, f, 0, n)
	_, err = f.WriteAt([]byte{1}, n*1024)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
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
	mem := memdev.NewBlockSize(256<<20, 1024)
	require.NoError(t, Format(mem, FormatOptions{BlockSize: 1024, JournalBlocks: 1024}))
	v, err := Open(mem, Options{Writable: true, PageCacheBytes: -1})
	require.NoError(t, err)
	f, err := v.Create("f")
	require.NoError(t, err)
	const n = 2 * 84 * 300
	fragment(t, f, 0, n)
	_, err = f.WriteAt([]byte{1}, n*1024)
	require.NoError(t, err)
	require.NoError(t, v.Sync())
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
