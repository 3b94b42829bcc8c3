# The tests that judge the mutants of each hot module of mmkit's core crate
# (docs/testing.md, "cargo-mutants"). Sourced by .ci/run and
# scripts/mutants-full.sh.
#   judges MODULE       every judge test: the models and the hostile input
#   main_judges MODULE  the main model tests alone (a full run's first stage)
# Both print nothing and fail for a module with no judges of its own.

judges() {
  case $1 in
    tree | vmap) echo range_model policy_model vmap_churn pooled sized_model hostile_range memmap_model free_list before_heap ;;
    buddy) echo buddy_model buddy_pcp_model hostile_buddy ;;
    percpu) echo percpu_model hostile_percpu ;;
    vblock) echo vblock_model hostile_vblock ;;
    nodes) echo nodes_model linux_nodes_model ;;
    *) return 1 ;;
  esac
}

main_judges() {
  case $1 in
    tree | vmap) echo range_model policy_model ;;
    buddy) echo buddy_model buddy_pcp_model ;;
    percpu) echo percpu_model ;;
    vblock) echo vblock_model ;;
    nodes) echo nodes_model linux_nodes_model ;;
    *) return 1 ;;
  esac
}
