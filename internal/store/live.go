package store

import (
	"context"
	"fmt"
)

// LiveCounts is how many of one cluster's work pods are in each live
// state.
type LiveCounts struct {
	Pending    int64 `json:"pending"`
	Dispatched int64 `json:"dispatched"`
	Running    int64 `json:"running"`
}

// countLiveQuery counts on the (cluster, state) index alone: one query for
// the whole fleet, where a page listing each cluster's live pods would be
// one query, and up to a page of rows, a cluster.
const countLiveQuery = `SELECT cluster, state, COUNT(*) FROM work_pods
WHERE state IN ('pending', 'dispatched', 'running') GROUP BY cluster, state`

// CountLive returns the live pods of every cluster that has any, by state.
func (s *sqlStore) CountLive(ctx context.Context) (map[string]LiveCounts, error) {
	rows, err := s.r.QueryContext(ctx, countLiveQuery)
	if err != nil {
		return nil, fmt.Errorf("count live work pods: %w", err)
	}
	defer rows.Close()
	out := map[string]LiveCounts{}
	for rows.Next() {
		var (
			cluster, state string
			n              int64
		)
		if err := rows.Scan(&cluster, &state, &n); err != nil {
			return nil, fmt.Errorf("count live work pods: %w", err)
		}
		c := out[cluster]
		switch State(state) {
		case StatePending:
			c.Pending = n
		case StateDispatched:
			c.Dispatched = n
		case StateRunning:
			c.Running = n
		}
		out[cluster] = c
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("count live work pods: %w", err)
	}
	return out, nil
}
