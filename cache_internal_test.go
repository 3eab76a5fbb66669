package ext4io

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/ext4io/ext4io/internal/e2fs"
)

// TestRandomReadsLeaveOneCacheEntry is issue 6's fragmentation case through
// the real mapping path: 10,000 random 4 KiB reads of a 32 MiB file with
// one extent leave exactly one extent-status cache entry for it (ext4 once
// cached the fragment each request asked for and left thousands).
func TestRandomReadsLeaveOneCacheEntry(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	os.Mkdir(src, 0o755)
	data := make([]byte, 32<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(data); i += 8 {
		binary.LittleEndian.PutUint64(data[i:], rng.Uint64())
	}
	os.WriteFile(filepath.Join(src, "big"), data, 0o644)
	img := filepath.Join(dir, "img")
	e2fs.Mkfs(t, img, "128M", "-b", "4096", "-d", src)
	if rows := e2fs.Extents(t, img, "big"); len(rows) != 1 {
		t.Fatalf("mkfs made %d extents, want 1", len(rows))
	}
	v, err := OpenImage(img, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	f, err := v.Open("big")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	before := v.CacheStats()
	const reads = 10_000
	for i := 0; i < reads; i++ {
		off := int64(rng.IntN(len(data)/4096)) * 4096
		if _, err := f.ReadAt(buf, off); err != nil {
			t.Fatal(err)
		}
		if i%997 == 0 && !bytes.Equal(buf, data[off:off+4096]) {
			t.Fatalf("read at %d returned wrong data", off)
		}
	}
	if n := escLen(v.cache, f.Ino()); n != 1 {
		t.Fatalf("%d cache entries for a single-extent file after %d random reads, want 1", n, reads)
	}
	st := v.CacheStats()
	if misses := st.Misses - before.Misses; misses > 1 {
		t.Errorf("%d cache misses, want at most 1", misses)
	}
	t.Logf("hits %d, misses %d, entries (all inodes) %d, bytes %d", st.Hits-before.Hits, st.Misses-before.Misses, st.Entries, st.Bytes)
}
