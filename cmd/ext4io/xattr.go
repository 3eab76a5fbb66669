package main

import (
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/ext4io/ext4io"
)

// Extended attribute commands, like attr's getfattr and setfattr:
//
//	ext4io getfattr [-h] IMAGE PATH [NAME]     all attributes (as getfattr -d -m -) or one
//	ext4io setfattr [-h] IMAGE PATH NAME VALUE set NAME (VALUE as setfattr -v takes it)
//	ext4io setfattr [-h] IMAGE PATH -x NAME    remove NAME
//
// -h acts on a symlink itself rather than its target. Values print as
// getfattr prints them: "text" when printable (a trailing NUL dropped),
// else 0s followed by base64. VALUE may be "quoted text", 0x hex or 0s
// base64, or plain text.

// xattrArgs takes -h out of args wherever it comes, as the other
// commands take their flags; "--" ends the flags, so that a NAME or
// VALUE after it may be "-h".
func xattrArgs(args []string) (follow bool, rest []string) {
	follow = true
	for i, a := range args {
		switch a {
		case "--":
			return follow, append(rest, args[i+1:]...)
		case "-h":
			follow = false
		default:
			rest = append(rest, a)
		}
	}
	return follow, rest
}

func cmdGetfattr(args []string, w io.Writer) error {
	follow, args := xattrArgs(args)
	if len(args) != 2 && len(args) != 3 {
		return errUsage
	}
	v, err := openImage(args[0])
	if err != nil {
		return err
	}
	defer v.Close()
	get, list := v.Getxattr, v.Listxattr
	if !follow {
		get, list = v.Lgetxattr, v.Llistxattr
	}
	names := args[2:]
	if len(names) == 0 {
		if names, err = list(args[1]); err != nil {
			return err
		}
		if len(names) == 0 {
			return nil // getfattr prints nothing for a file without attributes
		}
		slices.Sort(names) // getfattr's order
	}
	var b strings.Builder
	fmt.Fprintf(&b, "# file: %s\n", strings.TrimPrefix(args[1], "/"))
	for _, n := range names {
		val, err := get(args[1], n)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s=%s\n", printable(n), encodeXattrValue(val))
	}
	b.WriteString("\n")
	_, err = io.WriteString(w, b.String())
	return err
}

func cmdSetfattr(args []string, w io.Writer) error {
	follow, args := xattrArgs(args)
	var remove string
	if len(args) == 4 && args[2] == "-x" {
		remove = args[3]
	} else if len(args) != 4 {
		return errUsage
	}
	return withWritable(args[0], func(v *ext4io.Volume) error {
		if remove != "" {
			if follow {
				return v.Removexattr(args[1], remove)
			}
			return v.Lremovexattr(args[1], remove)
		}
		val, err := decodeXattrValue(args[3])
		if err != nil {
			return err
		}
		if follow {
			return v.Setxattr(args[1], args[2], val, 0)
		}
		return v.Lsetxattr(args[1], args[2], val, 0)
	})
}

// encodeXattrValue formats a value as getfattr's default encoding does.
func encodeXattrValue(val []byte) string {
	text := val
	if len(text) > 0 && text[len(text)-1] == 0 {
		text = text[:len(text)-1]
	}
	printable := true
	for _, c := range text {
		if c < 0x20 || c > 0x7e {
			printable = false
			break
		}
	}
	if !printable {
		return "0s" + base64.StdEncoding.EncodeToString(val)
	}
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`)
	return `"` + r.Replace(string(text)) + `"`
}

// decodeXattrValue parses a value as setfattr -v does.
func decodeXattrValue(s string) ([]byte, error) {
	switch {
	case len(s) >= 2 && s[0] == '"' && s[len(s)-1] == '"':
		return []byte(strings.NewReplacer(`\\`, `\`, `\"`, `"`).Replace(s[1 : len(s)-1])), nil
	case strings.HasPrefix(s, "0x") || strings.HasPrefix(s, "0X"):
		b, err := hex.DecodeString(s[2:])
		if err != nil {
			return nil, fmt.Errorf("bad hex value %q: %w", s, err)
		}
		return b, nil
	case strings.HasPrefix(s, "0s") || strings.HasPrefix(s, "0S"):
		b, err := base64.StdEncoding.DecodeString(s[2:])
		if err != nil {
			return nil, fmt.Errorf("bad base64 value %q: %w", s, err)
		}
		return b, nil
	}
	return []byte(s), nil
}
