package shard

import (
	"context"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// sighting is when this replica first saw a Lease's current version. A
// Lease's expiry is judged from it, as client-go's leaderelection does, and
// not from the renewTime in the Lease: that is the writer's clock, and a
// skew between the replicas' clocks would otherwise shorten the lease.
type sighting struct {
	resourceVersion string
	at              time.Time
}

// startFunc starts holding a spoke just acquired.
type startFunc func(h *holding, l *coordinationv1.Lease, sent time.Time)

// step is one look at the assignment: renew the member Lease, read every
// Lease of the prefix, then (if act) give up and acquire spokes as decide
// says. A step that cannot read the Leases decides nothing.
func (a *Assigner) step(ctx context.Context, fleet []string, act bool, start startFunc) {
	cctx, cancel := context.WithTimeout(ctx, a.o.RenewDeadline)
	defer cancel()
	if err := a.renewMember(cctx); err != nil && ctx.Err() == nil {
		a.o.Log.Warn("could not renew the member lease", "lease", a.member, "err", err)
	}
	list, err := a.o.Kube.CoordinationV1().Leases(a.o.Namespace).List(cctx, metav1.ListOptions{LabelSelector: labelShard + "=" + a.o.Prefix})
	if err != nil {
		if ctx.Err() == nil {
			a.o.Log.Warn("could not list the shard leases", "namespace", a.o.Namespace, "err", err)
		}
		return
	}
	now := time.Now()
	v := a.observe(now, list.Items, a.checkNames(fleet))
	a.collect(cctx, v.stale)
	if !act || ctx.Err() != nil {
		return
	}
	p := decide(v.state)
	for _, r := range p.release {
		a.giveUp(r.spoke, r.why)
	}
	for _, spoke := range p.acquire {
		a.acquire(cctx, ctx, spoke, v.leases[spoke], start)
	}
}

// view is what one step read: the state to decide on, the Lease of each
// spoke that has one, and member Leases long expired.
type view struct {
	state  state
	leases map[string]*coordinationv1.Lease
	stale  []*coordinationv1.Lease
}

// observe turns the listed Leases into a view at now and records Owners.
func (a *Assigner) observe(now time.Time, items []coordinationv1.Lease, fleet []string) view {
	v := view{leases: map[string]*coordinationv1.Lease{}}
	st := state{self: a.o.Identity, spokes: fleet, holder: map[string]string{}, longFree: map[string]bool{}}
	spokePrefix, memberPrefix := a.o.Prefix+"-spoke-", a.o.Prefix+"-member-"
	listed := map[string]bool{}
	for i := range items {
		l := &items[i]
		listed[l.Name] = true
		first := a.sight(l, now)
		holder, dur := holderOf(l), durationOf(l, a.o.LeaseDuration)
		live := holder != "" && now.Before(first.Add(dur))
		switch {
		case strings.HasPrefix(l.Name, spokePrefix):
			spoke := strings.TrimPrefix(l.Name, spokePrefix)
			v.leases[spoke] = l
			// A Lease naming this replica that it does not hold (a release
			// that failed) is free to it: acquiring it is one more epoch.
			if live && holder != a.o.Identity {
				st.holder[spoke] = holder
			}
		case strings.HasPrefix(l.Name, memberPrefix) && l.Name != a.member:
			if live {
				st.members = append(st.members, holder)
			} else if !now.Before(first.Add(dur + a.o.LeaseDuration)) {
				v.stale = append(v.stale, l)
			}
		}
	}
	for name := range a.seen {
		if !listed[name] {
			delete(a.seen, name)
		}
	}
	slices.Sort(st.members)
	st.members = slices.Compact(st.members)

	a.mu.Lock()
	defer a.mu.Unlock()
	for spoke, h := range a.held {
		if h.leaving() {
			st.leaving = append(st.leaving, spoke)
		} else {
			st.mine = append(st.mine, spoke)
		}
	}
	slices.Sort(st.mine)
	slices.Sort(st.leaving)
	owners := make(map[string]string, len(fleet))
	for _, spoke := range fleet {
		owners[spoke] = st.holder[spoke]
		_, held := a.held[spoke]
		if held || st.holder[spoke] != "" {
			delete(a.freeSince, spoke)
			continue
		}
		since, ok := a.freeSince[spoke]
		if !ok {
			a.freeSince[spoke] = now
		} else if now.Sub(since) >= a.o.LeaseDuration {
			st.longFree[spoke] = true
		}
	}
	for spoke := range a.freeSince {
		if _, ok := owners[spoke]; !ok {
			delete(a.freeSince, spoke)
		}
	}
	a.owners = owners
	v.state = st
	return v
}

// sight returns when this replica first saw l's current version.
func (a *Assigner) sight(l *coordinationv1.Lease, now time.Time) time.Time {
	s, ok := a.seen[l.Name]
	if !ok || s.resourceVersion != l.ResourceVersion {
		s = sighting{resourceVersion: l.ResourceVersion, at: now}
		a.seen[l.Name] = s
	}
	return s.at
}

// checkNames returns the fleet sorted and without duplicates, leaving out
// (and logging once) a name that cannot be part of a Lease's name.
func (a *Assigner) checkNames(fleet []string) []string {
	out := make([]string, 0, len(fleet))
	for _, s := range fleet {
		if msgs := validation.IsDNS1123Label(s); len(msgs) > 0 {
			if !a.refused[s] {
				a.refused[s] = true
				a.o.Log.Error("spoke name cannot name a lease: nobody will act on it", "spoke", s, "problem", strings.Join(msgs, "; "))
			}
			continue
		}
		out = append(out, s)
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// collect deletes member Leases of replicas gone for more than a lease
// duration (a pod's every start is a new identity, and a killed one never
// deletes its own), each only if unchanged since this replica read it.
func (a *Assigner) collect(ctx context.Context, stale []*coordinationv1.Lease) {
	for _, l := range stale {
		rv := l.ResourceVersion
		err := a.o.Kube.CoordinationV1().Leases(a.o.Namespace).Delete(ctx, l.Name,
			metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
		switch {
		case err == nil:
			a.o.Log.Info("deleted the member lease of a replica gone", "lease", l.Name, "identity", holderOf(l))
		case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		default:
			a.o.Log.Warn("could not delete a stale member lease", "lease", l.Name, "err", err)
		}
	}
}

// acquire claims spoke's Lease (seen as last listed, nil if there was none)
// and, if this replica won it in time, starts holding it.
func (a *Assigner) acquire(ctx, runParent context.Context, spoke string, seen *coordinationv1.Lease, start startFunc) {
	sent := time.Now()
	l, err := a.claim(ctx, spoke, seen)
	switch {
	case apierrors.IsConflict(err), apierrors.IsAlreadyExists(err):
		a.o.Log.Debug("another replica was first to a spoke", "spoke", spoke)
		return
	case err != nil:
		if runParent.Err() == nil {
			a.o.Log.Warn("could not acquire a spoke lease", "spoke", spoke, "err", err)
		}
		return
	}
	epoch := int64(transitionsOf(l))
	runCtx, stop := context.WithCancel(runParent)
	h := &holding{spoke: spoke, epoch: epoch, ctx: runCtx, stop: stop}
	a.mu.Lock()
	a.held[spoke] = h
	a.mu.Unlock()
	a.o.Log.Info("acquired a spoke", "spoke", spoke, "epoch", epoch)
	start(h, l, sent)
}
