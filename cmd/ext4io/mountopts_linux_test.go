package main

import (
	"fmt"
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

// TestMountCacheSizeBound: a cache_size larger than the machine's memory
// is a usage error, reported before the image is opened; one that fits is
// taken (the mount then fails on the missing image, not on the option).
func TestMountCacheSizeBound(t *testing.T) {
	mem := memTotal()
	if mem == 0 {
		t.Skip("no MemTotal in /proc/meminfo")
	}
	for _, o := range []string{"cache_size=1P", fmt.Sprintf("cache_size=%dK", mem>>10+1)} {
		err := cmdMount([]string{"-o", o, "/nonexistent/image", "/nonexistent/dir"}, io.Discard)
		assert.ErrorIs(t, err, errUsage, o)
		assert.ErrorContains(t, err, "more than the machine's memory", o)
	}
	err := cmdMount([]string{"-o", "cache_size=64M", "/nonexistent/image", "/nonexistent/dir"}, io.Discard)
	assert.Error(t, err)
	assert.NotErrorIs(t, err, errUsage)
	assert.NoError(t, checkCacheSize(1<<50, 0), "unknown memory")
}
