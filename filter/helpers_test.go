package filter

import (
	"strconv"
	"unsafe"

	cuckoo "github.com/seiflotfy/cuckoofilter"
)

func strconvF(x float64) string { return strconv.FormatFloat(x, 'f', 6, 64) }

func uintptrOf(w []uint64) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(w))) }

func newLibCuckoo(slots uint) *cuckoo.Filter { return cuckoo.NewFilter(slots) }
