package typemeta

// OnFastPath says whether Leading reads data without apimachinery.
func OnFastPath(data []byte) bool {
	_, _, ok := leadingPair(data)
	return ok
}
