package main

import (
	"strings"
	"testing"
)

// TestHelpHelp: "ext4io help help", which the usage's last line invites
// ("Run 'ext4io help COMMAND'"), prints the list of commands as "ext4io
// help" does. It said: unknown command "help".
func TestHelpHelp(t *testing.T) {
	want, _, _ := runCmd(t, "help")
	out, errOut, code := runCmd(t, "help", "help")
	if code != 0 || errOut != "" || out != want {
		t.Errorf("help help: exit %d, stderr %q, stdout %q; want exit 0 and the output of help", code, errOut, out)
	}
	if !strings.Contains(out, "Run 'ext4io help COMMAND'") {
		t.Errorf("help: %q", out)
	}
}
