package layout

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestHasSlashOrNUL compares the word-at-a-time test with a byte loop for
// every length up to 40 and every position of a '/', a NUL and the bytes
// next to them ('.', '0', 0x01, 0x80, 0xff).
func TestHasSlashOrNUL(t *testing.T) {
	slow := func(b []byte) bool { return strings.ContainsAny(string(b), "/\x00") }
	for n := 1; n <= 40; n++ {
		base := []byte(strings.Repeat("a", n))
		assert.False(t, hasSlashOrNUL(base), "len %d", n)
		for i := range n {
			for _, c := range []byte{'/', 0, '.', '0', 1, 0x80, 0xff, 0x2e, 0x30} {
				b := append([]byte(nil), base...)
				b[i] = c
				assert.Equal(t, slow(b), hasSlashOrNUL(b), "len %d, %#x at %d", n, c, i)
			}
		}
	}
}

func TestCheckDirNameDots(t *testing.T) {
	for name, bad := range map[string]bool{".": true, "..": true, "...": false, ".a": false, "a.": false, "a/b": true, "a\x00": true, "": true} {
		assert.Equal(t, bad, CheckDirName([]byte(name), false, 2) != "", "%q", name)
	}
	assert.Empty(t, CheckDirName([]byte(".."), true, 1))
	assert.NotEmpty(t, CheckDirName([]byte("."), true, 1))
}
