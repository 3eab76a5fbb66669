package t

import _ "example.com/m"
