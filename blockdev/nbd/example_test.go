package nbd_test

import (
	"fmt"
	"log"

	"github.com/ext4io/ext4io"
	"github.com/ext4io/ext4io/blockdev/nbd"
)

func ExampleParseURI() {
	for _, uri := range []string{
		"nbd://storage.example:10810/vol1",
		"nbd+unix:///vol1?socket=/run/nbd.sock",
		"nbd://[fd00::5]/",
	} {
		a, err := nbd.ParseURI(uri)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s %s export %q\n", a.Network, a.Addr, a.Export)
	}
	// Output:
	// tcp storage.example:10810 export "vol1"
	// unix /run/nbd.sock export "vol1"
	// tcp [fd00::5]:10809 export ""
}

// Opening an ext4 volume on an NBD export (this needs a server, so it is
// compiled but not run).
func ExampleOpen() {
	dev, err := nbd.Open("nbd+unix:///?socket=/run/ext4io-nbd.sock", nbd.Options{})
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	vol, err := ext4io.Open(dev, ext4io.Options{Writable: !dev.ReadOnly()})
	if err != nil {
		log.Fatal(err)
	}
	defer vol.Close()
}
