//! A safe event stream over libyaml (the `unsafe-libyaml-norway` port that serde_norway uses).
//!
//! Salt loads YAML with PyYAML's `CSafeLoader`, whose parser is libyaml itself, so this is
//! the same tokenizer and grammar Salt runs; only the resolution of tags and the
//! construction of values (in `compose` and `construct`) are re-done in Rust.
//!
//! Invariant: every `unsafe` block in this crate lives in this file. The parser state is
//! boxed so that its address never changes (libyaml keeps a pointer to it), the input
//! slice outlives the parser through the `'input` lifetime, and every event is copied into
//! owned Rust data and freed with `yaml_event_delete` before `next` returns.

use std::ffi::CStr;
use std::marker::PhantomData;
use std::mem::MaybeUninit;

use unsafe_libyaml_norway as unsafe_yaml;

/// A position in the input; `line` and `column` count from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    pub line: usize,
    pub column: usize,
}

impl Mark {
    fn from_sys(mark: unsafe_yaml::yaml_mark_t) -> Mark {
        Mark {
            line: usize::try_from(mark.line)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
            column: usize::try_from(mark.column)
                .unwrap_or(usize::MAX)
                .saturating_add(1),
        }
    }
}

/// A syntax error reported by libyaml.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub mark: Mark,
    pub message: String,
}

/// One parser event with owned data.
#[derive(Debug)]
pub(crate) enum Event {
    StreamStart,
    StreamEnd,
    DocumentStart,
    DocumentEnd,
    Alias {
        anchor: String,
    },
    Scalar {
        anchor: Option<String>,
        tag: Option<String>,
        value: String,
        /// libyaml's `plain_implicit`: the scalar is plain and untagged (or tagged `!`),
        /// so the implicit YAML 1.1 resolvers may type it. Quoted scalars never are.
        plain_implicit: bool,
    },
    SequenceStart {
        anchor: Option<String>,
        tag: Option<String>,
    },
    SequenceEnd,
    MappingStart {
        anchor: Option<String>,
        tag: Option<String>,
    },
    MappingEnd,
}

/// Pull parser over a borrowed UTF-8 input.
pub(crate) struct Parser<'input> {
    raw: Box<unsafe_yaml::yaml_parser_t>,
    done: bool,
    _input: PhantomData<&'input [u8]>,
}

impl<'input> Parser<'input> {
    /// Starts parsing `input`; fails only if libyaml cannot allocate its buffers.
    pub fn new(input: &'input [u8]) -> Result<Parser<'input>, SyntaxError> {
        let mut raw: Box<MaybeUninit<unsafe_yaml::yaml_parser_t>> = Box::new_uninit();
        // SAFETY: `yaml_parser_initialize` zeroes and initialises the whole struct behind
        // the (non-null, properly aligned) pointer before anything reads it.
        let mut raw = unsafe {
            if unsafe_yaml::yaml_parser_initialize(raw.as_mut_ptr()).fail {
                return Err(SyntaxError {
                    mark: Mark { line: 1, column: 1 },
                    message: "cannot initialise the YAML parser".to_owned(),
                });
            }
            raw.assume_init()
        };
        // SAFETY: the parser is initialised and boxed (stable address). `input` is borrowed
        // for `'input`, which outlives the parser, and a slice pointer is never null.
        unsafe {
            unsafe_yaml::yaml_parser_set_encoding(&mut *raw, unsafe_yaml::YAML_UTF8_ENCODING);
            unsafe_yaml::yaml_parser_set_input_string(&mut *raw, input.as_ptr(), input.len() as _);
        }
        Ok(Parser {
            raw,
            done: false,
            _input: PhantomData,
        })
    }

    /// The next event and the mark where it starts. After `StreamEnd` or an error the
    /// parser keeps returning the same outcome class (`StreamEnd` / an error).
    pub fn next_event(&mut self) -> Result<(Event, Mark), SyntaxError> {
        if self.done {
            return Ok((Event::StreamEnd, Mark { line: 1, column: 1 }));
        }
        if self.raw.error != unsafe_yaml::YAML_NO_ERROR {
            return Err(self.error());
        }
        let mut event = MaybeUninit::<unsafe_yaml::yaml_event_t>::uninit();
        // SAFETY: the parser is initialised and not in an error state; on success libyaml
        // fully initialises `event`, which we read once and then free exactly once.
        unsafe {
            if unsafe_yaml::yaml_parser_parse(&mut *self.raw, event.as_mut_ptr()).fail {
                return Err(self.error());
            }
            let event_ptr = event.as_mut_ptr();
            let mark = Mark::from_sys((*event_ptr).start_mark);
            let converted = convert(&*event_ptr);
            unsafe_yaml::yaml_event_delete(event_ptr);
            if matches!(converted, Event::StreamEnd) {
                self.done = true;
            }
            Ok((converted, mark))
        }
    }

    fn error(&self) -> SyntaxError {
        let parser = &*self.raw;
        // SAFETY: libyaml sets `problem`/`context` to null or to static NUL-terminated
        // strings.
        let problem = unsafe { c_text(parser.problem) };
        let context = unsafe { c_text(parser.context) };
        let mut message = problem.unwrap_or_else(|| "invalid YAML".to_owned());
        if let Some(context) = context {
            let at = Mark::from_sys(parser.context_mark);
            message = format!(
                "{message} ({context} starting at line {}, column {})",
                at.line, at.column
            );
        }
        let mark = if parser.error == unsafe_yaml::YAML_READER_ERROR {
            // Reader errors (bad UTF-8, control characters) carry a byte offset only.
            Mark { line: 1, column: 1 }
        } else {
            Mark::from_sys(parser.problem_mark)
        };
        if parser.error == unsafe_yaml::YAML_READER_ERROR {
            message = format!("{message} at byte offset {}", parser.problem_offset);
        }
        SyntaxError { mark, message }
    }
}

impl Drop for Parser<'_> {
    fn drop(&mut self) {
        // SAFETY: the parser was initialised in `new` and is deleted exactly once.
        unsafe { unsafe_yaml::yaml_parser_delete(&mut *self.raw) }
    }
}

/// Copies a NUL-terminated C string, if any.
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string.
unsafe fn c_text(ptr: *const libc::c_char) -> Option<String> {
    if ptr.is_null() {
        return None;
    }
    // SAFETY: guaranteed by the caller.
    Some(
        unsafe { CStr::from_ptr(ptr) }
            .to_string_lossy()
            .into_owned(),
    )
}

/// Copies an optional anchor or tag.
///
/// # Safety
/// `ptr` must be null or point to a NUL-terminated string.
unsafe fn owned(ptr: *const u8) -> Option<String> {
    // SAFETY: guaranteed by the caller.
    unsafe { c_text(ptr.cast()) }
}

/// Copies a libyaml event into owned data.
///
/// # Safety
/// `event` must be a fully initialised event returned by `yaml_parser_parse`.
unsafe fn convert(event: &unsafe_yaml::yaml_event_t) -> Event {
    // SAFETY (whole body): the union field read matches `type_`, as libyaml guarantees.
    unsafe {
        match event.type_ {
            unsafe_yaml::YAML_STREAM_START_EVENT => Event::StreamStart,
            unsafe_yaml::YAML_DOCUMENT_START_EVENT => Event::DocumentStart,
            unsafe_yaml::YAML_DOCUMENT_END_EVENT => Event::DocumentEnd,
            unsafe_yaml::YAML_ALIAS_EVENT => Event::Alias {
                anchor: owned(event.data.alias.anchor).unwrap_or_default(),
            },
            unsafe_yaml::YAML_SCALAR_EVENT => {
                let scalar = event.data.scalar;
                let bytes = if scalar.value.is_null() {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(scalar.value, scalar.length as usize)
                };
                Event::Scalar {
                    anchor: owned(scalar.anchor),
                    tag: owned(scalar.tag),
                    // libyaml only emits valid UTF-8; a lossy copy keeps this total anyway.
                    value: String::from_utf8_lossy(bytes).into_owned(),
                    plain_implicit: scalar.plain_implicit,
                }
            }
            unsafe_yaml::YAML_SEQUENCE_START_EVENT => Event::SequenceStart {
                anchor: owned(event.data.sequence_start.anchor),
                tag: owned(event.data.sequence_start.tag),
            },
            unsafe_yaml::YAML_SEQUENCE_END_EVENT => Event::SequenceEnd,
            unsafe_yaml::YAML_MAPPING_START_EVENT => Event::MappingStart {
                anchor: owned(event.data.mapping_start.anchor),
                tag: owned(event.data.mapping_start.tag),
            },
            unsafe_yaml::YAML_MAPPING_END_EVENT => Event::MappingEnd,
            // YAML_STREAM_END_EVENT, and YAML_NO_EVENT which libyaml never returns on success.
            _ => Event::StreamEnd,
        }
    }
}
