//go:build !linux

package bench

// openHostDisk is Linux only: elsewhere the bench reports no host disk
// counters.
func openHostDisk(string) *hostDisk { return nil }

func isTmpfs(string) bool { return false }
