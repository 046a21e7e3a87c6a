package main

import (
	"bytes"
	"encoding/json"
)

// strictJSON decodes data into v, refusing unknown keys.
func strictJSON(data []byte, v interface{}) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
