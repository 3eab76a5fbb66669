package main

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/ext4io/ext4io"
)

// TestMountBadOptions: malformed -o values are usage errors, reported
// before the image is opened or anything is mounted (fusefs.ParseOptions
// parses the FUSE options, cache_size is the command's).
func TestMountBadOptions(t *testing.T) {
	for _, o := range []string{"attr_timeout=x", "entry_timeout=-1", "ro,attr_timeout=1e9", "cache_size=lots"} {
		err := cmdMount([]string{"-o", o, "/nonexistent/image", "/nonexistent/dir"}, io.Discard)
		assert.ErrorIs(t, err, errUsage, o)
		if o != "cache_size=lots" {
			assert.ErrorIs(t, err, ext4io.ErrInvalid, o)
		}
	}
}
