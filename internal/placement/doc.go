// Package placement owns the placement decision: given what the caller
// learned about every spoke (whether the pod's class is offered there,
// whether the caller may create, health, draining, and — with a capacity
// view — whether some node takes the pod now), which spoke a work pod goes
// to, and every spoke's reason in kube-scheduler's style.
//
// It is pure: no client, no I/O, no clock. The same input gives the same
// Decision, so a decision can be replayed from what the row keeps, and two
// replicas given the same view decide alike.
//
// The rules, in order:
//
//   - A spoke is a candidate unless it is Excluded (with the caller's
//     reason) or Tried (a spilled pod never goes back), and, with a
//     capacity view, unless the pod does not fit there now.
//   - With a preference list, only the listed spokes are considered, in
//     the list's order: the first candidate wins, whether it fits by its
//     view or has none (the submitter's order is kept; spill-over moves
//     a pod that cannot start).
//   - Otherwise the spokes that fit by their view come first, by the most
//     Free of the pod's scarcest requested resource, ties in profile
//     order; then the spokes without a view, in profile order. Amounts
//     compare only when every view names the same resource (a CPU pod's
//     scarcest may be cpu on one spoke and memory on another): else the
//     fitting spokes, and the ones to wait on, go in profile order.
//   - When no candidate is left, the pod waits on the spoke whose view says
//     it does not fit now (not Excluded, not Tried, listed if a list was
//     given) with the shortest queue for its capacity — Queued (what the
//     spoke's unbound pods ask of the resource) ÷ Total — then the most
//     Total, ties in the preference list's order, else profile order:
//     Decision.Waits. A spoke whose nodes would not take the pod even
//     empty (Total 0) is no place to wait.
//   - Request.Strict turns that wait into a *NoFitError; a pod no spoke can
//     take at all is a *NoFitError too. The API answers both with 409 and
//     every spoke's reason.
package placement
