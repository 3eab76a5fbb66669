package ext4io_test

import (
	"bytes"
	"io"
	"os"
	"testing"
	"time"

	"github.com/ext4io/ext4io"
	"github.com/stretchr/testify/require"
)

// TestCopyWithinFile: io.CopyN(f, f, n), which calls f.ReadFrom with a
// reader of f, and io.Copy(w, f) with a w that writes to f, which calls
// f.WriteTo(w), copy n bytes and return, as they do on an os.File.
// ReadFrom held the File's mutex while it read from r, and WriteTo while
// it wrote to w, so a reader or writer that uses the same File
// deadlocked. The file is as long as the data plus what the copies
// appended past it, and its head is untouched.
func TestCopyWithinFile(t *testing.T) {
	v, _ := openOSVolume(t)
	defer v.Close()
	data := bytes.Repeat([]byte("0123456789abcdef"), 200_000) // 3.2 MB: several copy chunks
	for _, direct := range []bool{false, true} {
		flag := os.O_RDWR | os.O_CREATE | os.O_TRUNC
		if direct {
			flag |= ext4io.O_DIRECT
		}
		f, err := v.OpenFile("f", flag, 0o644)
		require.NoError(t, err)
		_, err = f.Write(data)
		require.NoError(t, err)
		n := int64(len(data) / 2)

		_, err = f.Seek(0, io.SeekStart)
		require.NoError(t, err)
		ok := guarded(t, "io.CopyN(f, f, n)", 5*time.Second, func() {
			k, err := io.CopyN(f, f, n)
			require.NoError(t, err)
			require.Equal(t, n, k)
		})
		if !ok {
			return
		}
		// Reads and writes move the one position: n read, n written.
		pos, err := f.Seek(0, io.SeekCurrent)
		require.NoError(t, err)
		require.Equal(t, 2*n, pos)
		require.EqualValues(t, len(data), f.Size())

		_, err = f.Seek(n, io.SeekStart)
		require.NoError(t, err)
		ok = guarded(t, "io.Copy(writer to f, f)", 5*time.Second, func() {
			// Half a chunk: the first write to f stops the copy.
			k, err := io.Copy(&limitWriter{w: f, n: copyChunkTest / 2}, f)
			require.ErrorIs(t, err, io.ErrShortWrite)
			require.EqualValues(t, copyChunkTest/2, k)
		})
		if !ok {
			return
		}
		got, err := v.ReadFile("f")
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(got), len(data), "direct %v", direct)
		require.Equal(t, data[:copyChunkTest], got[:copyChunkTest], "direct %v: the head changed", direct)
		require.NoError(t, f.Close())
	}
}

// copyChunkTest is the first chunk a copy reads, which no write reaches.
const copyChunkTest = 1 << 20

// limitWriter writes at most n bytes to w, then reports a short write.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	k, err := l.w.Write(p)
	l.n -= int64(k)
	if err == nil && l.n == 0 {
		err = io.ErrShortWrite
	}
	return k, err
}
