package cli

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// deleteSeen deletes the object named name that get finds, by its UID. With
// several replicas a DELETE whose answer was lost is sent again to the next
// one (package failover), which then finds the object gone: it was deleted,
// and deleteSeen says so rather than "not found". The UID keeps that second
// DELETE off a newer object of the same name.
func deleteSeen[T metav1.Object](ctx context.Context, name string,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	del func(context.Context, string, metav1.DeleteOptions) error,
) error {
	seen, err := get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	uid := seen.GetUID()
	err = del(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
