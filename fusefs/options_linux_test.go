package fusefs_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/fusefs"
)

func TestParseOptions(t *testing.T) {
	for _, c := range []struct {
		in   string
		want fusefs.Options
	}{
		{"", fusefs.Options{}},
		{",,", fusefs.Options{}},
		{"ro", fusefs.Options{ReadOnly: true}},
		{"ro,rw", fusefs.Options{}},
		{"allow_other,direct_io,debug", fusefs.Options{AllowOther: true, DirectIO: true, Debug: true}},
		{"no_default_permissions", fusefs.Options{NoDefaultPermissions: true}},
		{"no_default_permissions,default_permissions", fusefs.Options{}},
		{"no_writeback_cache", fusefs.Options{NoWritebackCache: true}},
		{"no_writeback_cache,writeback_cache", fusefs.Options{}},
		{"kernel_cache", fusefs.Options{KeepCache: true}},
		{"keep_cache", fusefs.Options{KeepCache: true}},
		{"fsname=/img/a,b", fusefs.Options{FsName: "/img/a", Extra: []string{"b"}}},
		{"attr_timeout=1,entry_timeout=0.5", fusefs.Options{AttrTimeout: time.Second, EntryTimeout: 500 * time.Millisecond}},
		{"attr_timeout=60", fusefs.Options{AttrTimeout: time.Minute}},
		{"attr_timeout=0,entry_timeout=0", fusefs.Options{AttrTimeout: -1, EntryTimeout: -1}},
		{"noatime,max_read=131072,ro", fusefs.Options{ReadOnly: true, Extra: []string{"noatime", "max_read=131072"}}},
	} {
		o, err := fusefs.ParseOptions(c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, o, c.in)
	}
	for _, bad := range []string{"attr_timeout=", "attr_timeout=x", "entry_timeout=-1", "attr_timeout=1e9", "ro,entry_timeout=NaN"} {
		o, err := fusefs.ParseOptions(bad)
		assert.ErrorIs(t, err, ext4io.ErrInvalid, bad)
		assert.Zero(t, o, bad)
	}
}
