//go:build !ext4io_mutant_ignorerevoke

package mutant

// IgnoreRevoke: replay revoked blocks (off; build with -tags ext4io_mutant_ignorerevoke to switch it on).
const IgnoreRevoke = false
