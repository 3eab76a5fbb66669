//go:build !linux

package blockdev

import "errors"

// errNoDsync is pwriteDsync's error: outside Linux there is no RWF_DSYNC,
// and WriteAtSync writes and flushes.
var errNoDsync = errors.New("RWF_DSYNC unsupported")

type invalDsync struct{}

func (invalDsync) Error() string { return "RWF_DSYNC: invalid argument" }

func (c *fileCore) pwriteDsync([]byte, int64) (int, error) { return 0, errNoDsync }
