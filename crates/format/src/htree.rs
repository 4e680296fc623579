//! Placeholder: filled in by its issue-2 work item.
