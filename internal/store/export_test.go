package store

// PodColumnsWithoutSpec lets the benchmark's raw SQL return what
// TransitionWorkPod returns.
const PodColumnsWithoutSpec = podColumnsWithoutSpec
