// Package wire chooses the encoding a Go client of the Nodus API speaks.
package wire

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
)

// Protobuf returns a copy of cfg whose clients send and ask for protobuf, as
// Kubernetes' own controllers do: decoding it costs a fraction of JSON's.
// JSON stays acceptable, because error bodies (Nodus' Status envelope) are
// always JSON.
func Protobuf(cfg *rest.Config) *rest.Config {
	pb := rest.CopyConfig(cfg)
	pb.ContentType = runtime.ContentTypeProtobuf
	pb.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return pb
}
