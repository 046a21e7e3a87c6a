package scheduler

import (
	"context"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	nodusv1 "github.com/nodus-dev/nodus/pkg/apis/nodus/v1"
	"github.com/nodus-dev/nodus/pkg/lending"
)

// project writes each owner's HostLending where its use or agreement
// changed, and deletes those whose reservation is gone.
func (c *Controller) project(ctx context.Context, hosts []*host) error {
	lendings, err := c.lendings.List(labels.Everything())
	if err != nil {
		return err
	}
	for _, l := range lendings {
		r, err := c.reservations.Get(l.Name)
		if apierrors.IsNotFound(err) || (err == nil && r.Spec.Project != l.Namespace) {
			err := c.client.NodusV1().HostLendings(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	// Written several at once, as placements are: the next pass, and the
	// executions created meanwhile, wait for this one to end. One at a
	// time, the HostLendings of 1,000 hosts lent at once held the first
	// executions after them for 0.8-1.2 s (nodus-bench's lending scenario).
	writes, ctx := errgroup.WithContext(ctx)
	writes.SetLimit(writers)
	for _, h := range hosts {
		r := h.reservation
		if p, err := c.projects.Get(r.Spec.Project); err != nil || p.DeletionTimestamp != nil {
			continue // no project (yet), or one being deleted: nothing to show it
		}
		pool, _ := c.pools.Get(h.pool)
		desired := lending.Status(r, pool, h.usage, h.borrowedIndices())
		current, err := c.lendings.HostLendings(r.Spec.Project).Get(r.Name)
		var write func() error
		switch {
		case apierrors.IsNotFound(err):
			l := &nodusv1.HostLending{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: r.Spec.Project}, Status: desired}
			write = func() error {
				_, err := c.client.NodusV1().HostLendings(l.Namespace).Create(ctx, l, metav1.CreateOptions{FieldManager: fieldManager})
				return err
			}
		case err != nil:
			write = func() error { return err }
		case !equality.Semantic.DeepEqual(current.Status, desired):
			l := current.DeepCopy()
			l.Status = desired
			write = func() error {
				_, err := c.client.NodusV1().HostLendings(l.Namespace).UpdateStatus(ctx, l, metav1.UpdateOptions{FieldManager: fieldManager})
				return err
			}
		default:
			continue
		}
		writes.Go(func() error {
			// A conflict or an existing one: the next pass sees it anew.
			if err := write(); err != nil && !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
				return err
			}
			return nil
		})
	}
	return writes.Wait()
}
