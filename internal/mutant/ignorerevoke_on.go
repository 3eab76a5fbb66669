//go:build ext4io_mutant_ignorerevoke

package mutant

// IgnoreRevoke: replay revoked blocks (on: this is a deliberately broken build).
const IgnoreRevoke = true
