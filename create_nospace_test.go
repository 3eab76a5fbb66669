package ext4io_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/memdev"
	"github.com/ext4io/ext4io/ext4iotest"
	"github.com/ext4io/ext4io/internal/e2fs"
	"github.com/stretchr/testify/require"
)

// TestCreateNoSpaceRetriesAfterCommit: every way of making a name, on a
// full volume whose only free blocks were freed by the running
// transaction (busy until it commits), commits and retries once instead
// of failing with ErrNoSpace, as Linux's ext4_create, ext4_mkdir and the
// others do (ext4_should_retry_alloc). The new name goes into a directory
// whose block is full, so it needs a new block; before the blocks are
// freed the same operation fails with ErrNoSpace, so the volume is full.
func TestCreateNoSpaceRetriesAfterCommit(t *testing.T) {
	long := func(c byte) string { return strings.Repeat(string(c), 255) }
	for _, tc := range []struct {
		name string
		make func(v *ext4io.Volume, d *ext4io.File, name string) error
	}{
		{"OpenFile O_CREATE", func(v *ext4io.Volume, _ *ext4io.File, name string) error {
			return closeOpened(v.OpenFile("d/"+name, os.O_RDWR|os.O_CREATE, 0o644))
		}},
		{"OpenFile O_CREATE|O_EXCL", func(v *ext4io.Volume, _ *ext4io.File, name string) error {
			return closeOpened(v.OpenFile("d/"+name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644))
		}},
		{"Create", func(v *ext4io.Volume, _ *ext4io.File, name string) error { return closeOpened(v.Create("d/" + name)) }},
		{"CreateAt", func(_ *ext4io.Volume, d *ext4io.File, name string) error { return closeOpened(d.CreateAt(name, 0o644)) }},
		{"MkdirAt", func(_ *ext4io.Volume, d *ext4io.File, name string) error { return closeOpened(d.MkdirAt(name, 0o755)) }},
		{"Mkdir", func(v *ext4io.Volume, _ *ext4io.File, name string) error { return v.Mkdir("d/"+name, 0o755) }},
		{"Symlink", func(v *ext4io.Volume, _ *ext4io.File, name string) error { return v.Symlink("target", "d/"+name) }},
		{"Link", func(v *ext4io.Volume, _ *ext4io.File, name string) error { return v.Link("f", "d/"+name) }},
		{"Mknod", func(v *ext4io.Volume, _ *ext4io.File, name string) error {
			return v.Mknod("d/"+name, fs.ModeNamedPipe|0o644, 0)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dev := memdev.NewBlockSize(16<<20, 4096)
			require.NoError(t, ext4io.Format(dev, ext4io.FormatOptions{ReservedPercent: -1}))
			v, err := ext4io.Open(dev, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1})
			require.NoError(t, err)
			require.NoError(t, v.WriteFile("f", nil, 0o644))
			require.NoError(t, v.Mkdir("d", 0o755))
			// Fill d's only block with 255-byte names: one more needs a
			// new block.
			for i := byte('a'); ; i++ {
				require.NoError(t, v.WriteFile("d/"+long(i), nil, 0o644))
				fi, err := v.Stat("d")
				require.NoError(t, err)
				if fi.Size() > 4096 {
					t.Fatalf("d grew to %d bytes before its block was full", fi.Size())
				}
				if 4096-12-24-int(i-'a'+1)*264 < 264 {
					break
				}
			}
			require.NoError(t, v.WriteFile("junk", make([]byte, 1<<20), 0o644))
			fillVolume(t, v)
			require.NoError(t, v.Sync())
			d, err := v.Open("d")
			require.NoError(t, err)
			defer d.Close()
			require.ErrorIs(t, tc.make(v, d, long('X')), ext4io.ErrNoSpace, "the volume is not full")
			require.NoError(t, v.Remove("junk")) // its blocks are busy until a commit
			require.NoError(t, tc.make(v, d, long('Y')), "created with blocks freed by the running transaction")
			fi, err := v.Stat("d")
			require.NoError(t, err)
			require.Greater(t, fi.Size(), int64(4096), "d did not need a new block")
			require.NoError(t, d.Close())
			require.NoError(t, v.Close())
			ext4iotest.FsckDev(t, dev)
		})
	}
}

// closeOpened closes a File just opened or created.
func closeOpened(f *ext4io.File, err error) error {
	if err != nil {
		return err
	}
	return f.Close()
}

// fillVolume writes a file until the volume has no free block.
func fillVolume(t *testing.T, v *ext4io.Volume) {
	t.Helper()
	f, err := v.OpenFile("fill", os.O_RDWR|os.O_CREATE|ext4io.O_DIRECT, 0o644)
	require.NoError(t, err)
	defer f.Close()
	var off int64
	for _, chunk := range [][]byte{make([]byte, 1<<20), make([]byte, 4096)} {
		for {
			n, err := f.WriteAt(chunk, off)
			off += int64(n)
			if errors.Is(err, ext4io.ErrNoSpace) {
				break
			}
			require.NoError(t, err)
		}
	}
}

// TestInlineConvertNoSpaceRetriesAfterCommit: a write that moves an
// inline file's data to a block of its own, on a full volume whose only
// free blocks were freed by the running transaction, commits and retries
// once instead of failing with ErrNoSpace, as the write itself does.
func TestInlineConvertNoSpaceRetriesAfterCommit(t *testing.T) {
	img := filepath.Join(t.TempDir(), "img")
	e2fs.Mkfs(t, img, "16M", "-O", "inline_data", "-m", "0", "-b", "4096")
	v, err := ext4io.OpenImage(img, ext4io.Options{Writable: true, WritebackAge: -1, CommitInterval: -1, PageCacheBytes: -1})
	require.NoError(t, err)
	for _, n := range []string{"s1", "s2"} {
		require.NoError(t, v.WriteFile(n, []byte("small"), 0o644))
	}
	require.NoError(t, v.WriteFile("junk", make([]byte, 1<<20), 0o644))
	fillVolume(t, v)
	require.NoError(t, v.Sync())
	grow := func(name string) error {
		f, err := v.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = f.WriteAt([]byte("x"), 8192) // past what fits inline
		return err
	}
	require.ErrorIs(t, grow("s1"), ext4io.ErrNoSpace, "the volume is not full")
	require.NoError(t, v.Remove("junk")) // its blocks are busy until a commit
	require.NoError(t, grow("s2"), "converted with blocks freed by the running transaction")
	require.NoError(t, v.Close())
	e2fs.Fsck(t, img)
}
