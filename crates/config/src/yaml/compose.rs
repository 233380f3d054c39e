//! Events to a node graph, as PyYAML's composer does: tags are resolved here, anchors are
//! registered when their node starts (so an alias may point at an enclosing collection,
//! which `construct` then rejects), and a stream must hold at most one document.

use std::collections::HashMap;

use super::events::{Event, Mark, Parser};
use super::resolve::{resolve_scalar, MAP_TAG, SEQ_TAG};
use super::YamlError;

/// Index of a node in [`Document::nodes`].
pub(crate) type NodeId = usize;

#[derive(Debug)]
pub(crate) enum NodeKind {
    Scalar(String),
    Sequence(Vec<NodeId>),
    Mapping(Vec<(NodeId, NodeId)>),
}

#[derive(Debug)]
pub(crate) struct Node {
    pub kind: NodeKind,
    /// The resolved tag, e.g. `tag:yaml.org,2002:int`.
    pub tag: String,
    pub mark: Mark,
}

/// One composed document; aliases are shared node ids.
#[derive(Debug)]
pub(crate) struct Document {
    pub nodes: Vec<Node>,
    pub root: NodeId,
}

/// A collection being filled in.
struct Open {
    id: NodeId,
    /// For mappings, the key waiting for its value.
    pending_key: Option<NodeId>,
}

/// Composes the single document of `input`; `None` for an empty stream.
pub(crate) fn compose(input: &[u8]) -> Result<Option<Document>, YamlError> {
    let mut parser = Parser::new(input).map_err(YamlError::from)?;
    let mut nodes: Vec<Node> = Vec::new();
    let mut anchors: HashMap<String, (NodeId, Mark)> = HashMap::new();
    let mut stack: Vec<Open> = Vec::new();
    let mut root: Option<NodeId> = None;
    let mut documents = 0usize;

    loop {
        let (event, mark) = parser.next_event().map_err(YamlError::from)?;
        let finished = match event {
            Event::StreamStart | Event::DocumentEnd => None,
            Event::StreamEnd => break,
            Event::DocumentStart => {
                documents += 1;
                if documents > 1 {
                    return Err(YamlError::at(
                        mark,
                        "expected a single document in the stream, but found another document",
                    ));
                }
                anchors.clear();
                None
            }
            Event::Alias { anchor } => match anchors.get(&anchor) {
                Some(&(id, _)) => Some(id),
                None => {
                    return Err(YamlError::at(
                        mark,
                        format!("found undefined alias {anchor:?}"),
                    ))
                }
            },
            Event::Scalar {
                anchor,
                tag,
                value,
                plain_implicit,
            } => {
                let tag = match tag {
                    Some(tag) if tag != "!" => tag,
                    _ => resolve_scalar(&value, plain_implicit).to_owned(),
                };
                let id = push(&mut nodes, NodeKind::Scalar(value), tag, mark);
                register(&mut anchors, anchor, id, mark)?;
                Some(id)
            }
            Event::SequenceStart { anchor, tag } => {
                let tag = collection_tag(tag, SEQ_TAG);
                let id = push(&mut nodes, NodeKind::Sequence(Vec::new()), tag, mark);
                register(&mut anchors, anchor, id, mark)?;
                stack.push(Open {
                    id,
                    pending_key: None,
                });
                None
            }
            Event::MappingStart { anchor, tag } => {
                let tag = collection_tag(tag, MAP_TAG);
                let id = push(&mut nodes, NodeKind::Mapping(Vec::new()), tag, mark);
                register(&mut anchors, anchor, id, mark)?;
                stack.push(Open {
                    id,
                    pending_key: None,
                });
                None
            }
            Event::SequenceEnd | Event::MappingEnd => stack.pop().map(|open| open.id),
        };
        if let Some(child) = finished {
            match stack.last_mut() {
                None => root = Some(child),
                Some(parent) => attach(&mut nodes, parent, child),
            }
        }
    }
    Ok(root.map(|root| Document { nodes, root }))
}

fn push(nodes: &mut Vec<Node>, kind: NodeKind, tag: String, mark: Mark) -> NodeId {
    nodes.push(Node { kind, tag, mark });
    nodes.len() - 1
}

fn collection_tag(tag: Option<String>, default: &str) -> String {
    match tag {
        Some(tag) if tag != "!" => tag,
        _ => default.to_owned(),
    }
}

fn register(
    anchors: &mut HashMap<String, (NodeId, Mark)>,
    anchor: Option<String>,
    id: NodeId,
    mark: Mark,
) -> Result<(), YamlError> {
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if let Some((_, first)) = anchors.get(&anchor) {
        return Err(YamlError::at(
            mark,
            format!(
                "found duplicate anchor {anchor:?}; first occurrence at line {}, column {}",
                first.line, first.column
            ),
        ));
    }
    anchors.insert(anchor, (id, mark));
    Ok(())
}

fn attach(nodes: &mut [Node], parent: &mut Open, child: NodeId) {
    let Some(node) = nodes.get_mut(parent.id) else {
        return;
    };
    match &mut node.kind {
        NodeKind::Sequence(items) => items.push(child),
        NodeKind::Mapping(pairs) => match parent.pending_key.take() {
            None => parent.pending_key = Some(child),
            Some(key) => pairs.push((key, child)),
        },
        NodeKind::Scalar(_) => {}
    }
}
