//go:build !linux

package blockdev

// Outside Linux, Claim has the in-process registry alone: no flock and no
// mount check.

func exclFlag(path string, readOnly bool) int { return 0 }

func busyErr(path string, err error) error { return nil }
