package shard

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// labelShard marks the Leases of one prefix, so one List reads them all.
const labelShard = "crucible.dev/shard"

// errTaken: the Lease is no longer this replica's (another holds it, or it
// was deleted); it must not be written again under the old epoch.
var errTaken = errors.New("lease taken by another holder")

func spokeLeaseName(prefix, spoke string) string { return prefix + "-spoke-" + spoke }

// memberLeaseName hashes the identity: a host name and a UUID joined by "_"
// is not a valid object name.
func memberLeaseName(prefix, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	return prefix + "-member-" + hex.EncodeToString(sum[:8])
}

func holderOf(l *coordinationv1.Lease) string { return ptr.Deref(l.Spec.HolderIdentity, "") }

func transitionsOf(l *coordinationv1.Lease) int32 { return ptr.Deref(l.Spec.LeaseTransitions, 0) }

// durationOf is the lease duration l's writer promised, def if it says none.
func durationOf(l *coordinationv1.Lease, def time.Duration) time.Duration {
	if s := ptr.Deref(l.Spec.LeaseDurationSeconds, 0); s > 0 {
		return time.Duration(s) * time.Second
	}
	return def
}

func (a *Assigner) leaseSeconds() *int32 { return ptr.To(int32(a.o.LeaseDuration / time.Second)) }

// claim makes this replica the holder of spoke's Lease, seen being the
// version this replica judged free (nil: there was none). The epoch is the
// Lease's leaseTransitions, one more than before: every new holder, this
// replica again included, gets a higher one, and a released Lease keeps its
// count. A Lease starts at 1, so 0 is never an epoch. Conflict and
// AlreadyExists mean another replica was first.
func (a *Assigner) claim(ctx context.Context, spoke string, seen *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	leases := a.o.Kube.CoordinationV1().Leases(a.o.Namespace)
	now := metav1.NewMicroTime(time.Now())
	if seen == nil {
		return leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: spokeLeaseName(a.o.Prefix, spoke), Namespace: a.o.Namespace, Labels: map[string]string{labelShard: a.o.Prefix}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.o.Identity), LeaseDurationSeconds: a.leaseSeconds(),
				AcquireTime: &now, RenewTime: &now, LeaseTransitions: ptr.To(int32(1))},
		}, metav1.CreateOptions{})
	}
	l := seen.DeepCopy()
	l.Spec.HolderIdentity = ptr.To(a.o.Identity)
	l.Spec.LeaseDurationSeconds = a.leaseSeconds()
	l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
	l.Spec.LeaseTransitions = ptr.To(transitionsOf(seen) + 1)
	return leases.Update(ctx, l, metav1.UpdateOptions{})
}

// write updates this replica's Lease of epoch from last, changed by
// change. On a conflict (an update whose answer was lost moved the version
// on) it reads the Lease again and retries once if it still names this
// replica and epoch; otherwise errTaken. sent is when the first update
// was sent: the earliest moment others can have seen the write, so the
// safe base for RenewDeadline.
func (a *Assigner) write(ctx context.Context, epoch int64, last *coordinationv1.Lease, change func(*coordinationv1.LeaseSpec, metav1.MicroTime)) (_ *coordinationv1.Lease, sent time.Time, _ error) {
	leases := a.o.Kube.CoordinationV1().Leases(a.o.Namespace)
	sent = time.Now()
	next := last.DeepCopy()
	change(&next.Spec, metav1.NewMicroTime(sent))
	l, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err == nil || !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
		return l, sent, err
	}
	if apierrors.IsNotFound(err) {
		return nil, sent, fmt.Errorf("lease %s deleted: %w", last.Name, errTaken)
	}
	fresh, err := leases.Get(ctx, last.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, sent, fmt.Errorf("lease %s deleted: %w", last.Name, errTaken)
	case err != nil:
		return nil, sent, err
	case holderOf(fresh) != a.o.Identity || int64(transitionsOf(fresh)) != epoch:
		return nil, sent, fmt.Errorf("lease %s held by %q at epoch %d: %w", last.Name, holderOf(fresh), transitionsOf(fresh), errTaken)
	}
	change(&fresh.Spec, metav1.NewMicroTime(time.Now()))
	l, err = leases.Update(ctx, fresh, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return nil, sent, fmt.Errorf("lease %s changed while renewing: %w", last.Name, errTaken)
	}
	return l, sent, err
}

// renew extends this replica's hold of last.
func (a *Assigner) renew(ctx context.Context, epoch int64, last *coordinationv1.Lease) (*coordinationv1.Lease, time.Time, error) {
	return a.write(ctx, epoch, last, func(s *coordinationv1.LeaseSpec, now metav1.MicroTime) {
		s.HolderIdentity = ptr.To(a.o.Identity)
		s.LeaseDurationSeconds = a.leaseSeconds()
		s.RenewTime = &now
	})
}

// release clears the holder, as client-go's ReleaseOnCancel does, keeping
// leaseTransitions so that the next holder's epoch is higher still.
func (a *Assigner) release(ctx context.Context, epoch int64, last *coordinationv1.Lease) error {
	_, _, err := a.write(ctx, epoch, last, func(s *coordinationv1.LeaseSpec, now metav1.MicroTime) {
		s.HolderIdentity = nil
		s.LeaseDurationSeconds = ptr.To(int32(1))
		s.RenewTime = &now
	})
	return err
}

// renewMember keeps this replica's member Lease current, creating it if
// need be. Members only weigh in the fair share, never in who may act on
// a spoke, so a failure here is not a safety matter.
func (a *Assigner) renewMember(ctx context.Context) error {
	leases := a.o.Kube.CoordinationV1().Leases(a.o.Namespace)
	now := metav1.NewMicroTime(time.Now())
	if a.memberLease == nil {
		l, err := leases.Get(ctx, a.member, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			l, err = leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: a.member, Namespace: a.o.Namespace, Labels: map[string]string{labelShard: a.o.Prefix}},
				Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(a.o.Identity), LeaseDurationSeconds: a.leaseSeconds(),
					AcquireTime: &now, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err != nil {
				return fmt.Errorf("create member lease %s: %w", a.member, err)
			}
			a.memberLease = l
			return nil
		}
		if err != nil {
			return fmt.Errorf("get member lease %s: %w", a.member, err)
		}
		a.memberLease = l
	}
	next := a.memberLease.DeepCopy()
	next.Spec.HolderIdentity = ptr.To(a.o.Identity)
	next.Spec.LeaseDurationSeconds = a.leaseSeconds()
	next.Spec.RenewTime = &now
	l, err := leases.Update(ctx, next, metav1.UpdateOptions{})
	if err != nil {
		a.memberLease = nil // read again next time
		return fmt.Errorf("update member lease %s: %w", a.member, err)
	}
	a.memberLease = l
	return nil
}

func (a *Assigner) deleteMember(ctx context.Context) error {
	a.memberLease = nil
	err := a.o.Kube.CoordinationV1().Leases(a.o.Namespace).Delete(ctx, a.member, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete member lease %s: %w", a.member, err)
	}
	return nil
}
