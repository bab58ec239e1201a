// Who the caller is and what they may do, as GET /api/whoami said. The UI
// hides what the caller may not do; the API decides every request anyway.
let who = null;

export function setWho(w) { who = w; }
export function whoami() { return who; }

// may reports whether the caller has right (create, list, get, delete,
// log, artifacts) on cluster; without a cluster, on any cluster.
export function may(right, cluster) {
  if (!who) return false;
  if (who.all && who.all[right]) return true;
  if (cluster) return Boolean(who.clusters && who.clusters[cluster] && who.clusters[cluster][right]);
  return Object.values(who.clusters || {}).some((r) => r[right]);
}
