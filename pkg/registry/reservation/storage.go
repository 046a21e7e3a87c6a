package reservation

import (
	"k8s.io/apimachinery/pkg/runtime"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/registry/base"
)

// Kind describes the Reservation storage and its status subresource.
func Kind() base.Kind {
	return base.Kind{
		Resource: nodusv1.Resource("reservations"), Singular: nodusv1.Resource("reservation"),
		New:     func() runtime.Object { return &nodusv1.Reservation{} },
		NewList: func() runtime.Object { return &nodusv1.ReservationList{} },
		Rules:   rules, Table: table, Fields: selectable,
		Indexed: "status.node", // every agent watches its node's
	}
}
