//! The subset of `salt.utils.color.get_colors()` the outputters use.
//!
//! Each color is `TextFormat(...)`, whose sequence always starts with a reset (`0;`).
//! With color off every entry, including the reset, is the empty string.

pub(crate) struct Colors {
    pub(crate) green: &'static str,
    pub(crate) light_yellow: &'static str,
    pub(crate) cyan: &'static str,
    pub(crate) red: &'static str,
    pub(crate) light_red: &'static str,
    pub(crate) endc: &'static str,
}

const ON: Colors = Colors {
    green: "\x1b[0;32m",
    light_yellow: "\x1b[0;1;33m",
    cyan: "\x1b[0;36m",
    red: "\x1b[0;31m",
    light_red: "\x1b[0;1;31m",
    endc: "\x1b[0;0m",
};

const OFF: Colors = Colors {
    green: "",
    light_yellow: "",
    cyan: "",
    red: "",
    light_red: "",
    endc: "",
};

pub(crate) fn colors(enabled: bool) -> &'static Colors {
    if enabled {
        &ON
    } else {
        &OFF
    }
}
