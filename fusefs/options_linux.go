//go:build linux

package fusefs

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/ext4io/ext4io"
)

// ParseOptions parses mount options in the comma-separated form of
// mount -o and fuse2fs -o, as ext4io mount takes them:
//
//	ro, rw                              ReadOnly
//	allow_other                         AllowOther
//	default_permissions                 NoDefaultPermissions false
//	no_default_permissions              NoDefaultPermissions
//	direct_io                           DirectIO
//	writeback_cache, no_writeback_cache NoWritebackCache false, true
//	kernel_cache, keep_cache            KeepCache
//	debug                               Debug
//	fsname=NAME                         FsName
//	attr_timeout=S, entry_timeout=S     AttrTimeout, EntryTimeout
//
// The timeouts are in seconds, fractions allowed, as libfuse's; 0 turns
// the cache off (a negative Duration in Options). A later option
// overrides an earlier one, empty options are skipped, and any other
// option goes to Extra, passed to the kernel as given. A malformed value
// is an error wrapping ext4io.ErrInvalid.
func ParseOptions(s string) (Options, error) {
	var o Options
	for _, opt := range strings.Split(s, ",") {
		switch opt {
		case "":
		case "ro":
			o.ReadOnly = true
		case "rw":
			o.ReadOnly = false
		case "allow_other":
			o.AllowOther = true
		case "default_permissions":
			o.NoDefaultPermissions = false
		case "no_default_permissions":
			o.NoDefaultPermissions = true
		case "direct_io":
			o.DirectIO = true
		case "writeback_cache":
			o.NoWritebackCache = false
		case "no_writeback_cache":
			o.NoWritebackCache = true
		case "kernel_cache", "keep_cache":
			o.KeepCache = true
		case "debug":
			o.Debug = true
		default:
			var err error
			if v, ok := strings.CutPrefix(opt, "fsname="); ok {
				o.FsName = v
			} else if v, ok := strings.CutPrefix(opt, "attr_timeout="); ok {
				o.AttrTimeout, err = parseTimeout("attr_timeout", v)
			} else if v, ok := strings.CutPrefix(opt, "entry_timeout="); ok {
				o.EntryTimeout, err = parseTimeout("entry_timeout", v)
			} else {
				o.Extra = append(o.Extra, opt)
			}
			if err != nil {
				return Options{}, err
			}
		}
	}
	return o, nil
}

// parseTimeout parses a libfuse-style timeout in seconds ("1", "0.5";
// "0" turns the cache off: -1 in Options).
func parseTimeout(name, v string) (time.Duration, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f <= 1e6) { // NaN too
		return 0, fmt.Errorf("fusefs: %s=%s: want seconds: %w", name, v, ext4io.ErrInvalid)
	}
	if f == 0 {
		return -1, nil
	}
	return time.Duration(f * float64(time.Second)), nil
}
