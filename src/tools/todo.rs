//! `todo_write`: validates the task list and returns it as `detail.todos`.

use super::args::TodoWriteArgs;
use super::{Fail, ToolOutcome};
use serde_json::json;

/// Allowed `status` values.
pub(crate) const STATUSES: [&str; 3] = ["pending", "in_progress", "completed"];

/// Validates and echoes the list. Errors: empty `content`, unknown `status`.
pub(crate) fn run(a: TodoWriteArgs) -> Result<ToolOutcome, Fail> {
    let mut problems = Vec::new();
    for (i, t) in a.todos.iter().enumerate() {
        if t.content.trim().is_empty() {
            problems.push(format!("todos[{i}].content is empty"));
        }
        if !STATUSES.contains(&t.status.as_str()) {
            problems.push(format!(
                "todos[{i}].status is `{}`; use one of pending, in_progress, completed",
                t.status
            ));
        }
    }
    if !problems.is_empty() {
        return Err(Fail::Error(format!(
            "invalid todo list: {}",
            problems.join("; ")
        )));
    }
    let todos: Vec<_> = a
        .todos
        .iter()
        .map(|t| json!({"content": t.content.trim(), "status": t.status}))
        .collect();
    let done = a.todos.iter().filter(|t| t.status == "completed").count();
    let mut out = format!("Todo list updated ({done}/{} completed):\n", a.todos.len());
    for t in &a.todos {
        let mark = match t.status.as_str() {
            "completed" => "[x]",
            "in_progress" => "[~]",
            _ => "[ ]",
        };
        out.push_str(&format!("{mark} {}\n", t.content.trim()));
    }
    Ok(ToolOutcome::ok(out, json!({ "todos": todos })))
}
