package m

import (
	"fmt"

	"example.com/m/low"
	"example.com/m/mid"
)

var _ = fmt.Sprint(low.X, mid.Y)
