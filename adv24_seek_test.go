package ext4io_test

import (
	"errors"
	"io"
	"io/fs"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSeekBadWhence: a whence that is none of io.SeekStart, SeekCurrent
// and SeekEnd fails with EINVAL and leaves the offset, as os.File's Seek
// does, instead of being taken as io.SeekStart.
func TestSeekBadWhence(t *testing.T) {
	_, v, f := openWritableWithFile(t)
	defer v.Close()
	defer f.Close()
	_, err := f.Seek(100, io.SeekStart)
	require.NoError(t, err)
	for _, whence := range []int{-1, 3, 7} {
		pos, err := f.Seek(5, whence)
		var pe *fs.PathError
		if !errors.As(err, &pe) || !errors.Is(err, syscall.EINVAL) {
			t.Fatalf("Seek(5, %d) = %d, %v; want an *fs.PathError wrapping EINVAL", whence, pos, err)
		}
	}
	pos, err := f.Seek(0, io.SeekCurrent)
	require.NoError(t, err)
	require.EqualValues(t, 100, pos, "a failed Seek moved the offset")
}

// TestSeekRewindsReadDir: Seek(0, io.SeekStart) on a directory makes the
// next ReadDir start again from the first entry (rewinddir), as on an
// os.File, and it sees entries added since.
func TestSeekRewindsReadDir(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	require.NoError(t, v.Mkdir("d", 0o755))
	for _, n := range []string{"d/a", "d/b", "d/c"} {
		require.NoError(t, v.WriteFile(n, nil, 0o644))
	}
	d, err := v.Open("d")
	require.NoError(t, err)
	defer d.Close()
	first, err := d.ReadDir(-1)
	require.NoError(t, err)
	require.Len(t, first, 3)
	rest, err := d.ReadDir(1)
	require.ErrorIs(t, err, io.EOF)
	require.Empty(t, rest)

	require.NoError(t, v.WriteFile("d/e", nil, 0o644))
	_, err = d.Seek(0, io.SeekStart)
	require.NoError(t, err)
	again, err := d.ReadDir(-1)
	require.NoError(t, err)
	names := make(map[string]bool)
	for _, e := range again {
		names[e.Name()] = true
	}
	require.Equal(t, map[string]bool{"a": true, "b": true, "c": true, "e": true}, names)
}
