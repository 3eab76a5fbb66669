package fusefs_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io/fusefs"
)

// TestMountKeepCache changes a file's bytes behind the kernel's back (by
// the Volume, not the mount) between two opens through the mount: with
// KeepCache (FOPEN_KEEP_CACHE) the second open still reads the pages the
// kernel cached, without it the open drops them and reads the new bytes.
func TestMountKeepCache(t *testing.T) {
	needFUSE(t)
	for _, keep := range []bool{false, true} {
		img := newImage(t, 16<<20)
		m := mount(t, img, fusefs.Options{KeepCache: keep})
		require.NoError(t, os.WriteFile(m.path("f"), []byte("old!"), 0o644))
		b, err := os.ReadFile(m.path("f"))
		require.NoError(t, err)
		require.Equal(t, "old!", string(b))
		f, err := m.v.OpenFile("/f", os.O_RDWR, 0)
		require.NoError(t, err)
		_, err = f.WriteAt([]byte("new!"), 0)
		require.NoError(t, err)
		require.NoError(t, f.Close())
		b, err = os.ReadFile(m.path("f"))
		require.NoError(t, err)
		if keep {
			assert.Equal(t, "old!", string(b), "KeepCache: the kernel keeps its pages across opens")
		} else {
			assert.Equal(t, "new!", string(b), "without KeepCache an open drops the cached pages")
		}
		m.unmount()
	}
}
