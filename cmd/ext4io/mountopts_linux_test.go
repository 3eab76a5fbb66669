package main

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseTimeout(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{{"1", time.Second}, {"0.5", 500 * time.Millisecond}, {"60", time.Minute}, {"0", -1}} {
		d, err := parseTimeout("attr_timeout", c.in)
		require.NoError(t, err, c.in)
		assert.Equal(t, c.want, d, c.in)
	}
	for _, bad := range []string{"", "x", "-1", "1e9"} {
		_, err := parseTimeout("attr_timeout", bad)
		assert.ErrorIs(t, err, errUsage, bad)
	}
}
