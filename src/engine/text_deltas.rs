//! Streamed text of one provider read, gathered for the host without an allocation per
//! delta (the built-in engine's batches, [`super::EngineEvent::Deltas`]; spec
//! `providers.md` §6.1).

/// Streamed text deltas in order, each an answer delta or a reasoning delta, copied
/// one after the other into one buffer: gathering a delta costs no allocation once the
/// buffers have grown, and [`TextDeltas::clear`] keeps them for the next batch.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TextDeltas {
    text: String,
    /// Each delta: whether it is reasoning, and where it ends in `text` (bytes).
    ends: Vec<(bool, usize)>,
}

impl TextDeltas {
    /// Adds a delta: reasoning text when `reasoning`, else the answer's text.
    pub fn push(&mut self, reasoning: bool, text: &str) {
        self.text.push_str(text);
        self.ends.push((reasoning, self.text.len()));
    }

    /// The deltas, in order: (whether reasoning, text).
    pub fn iter(&self) -> impl Iterator<Item = (bool, &str)> + '_ {
        let mut start = 0;
        self.ends.iter().map(move |&(reasoning, end)| {
            let text = self.text.get(start..end).unwrap_or_default();
            start = end;
            (reasoning, text)
        })
    }

    /// How many deltas.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Empties it, keeping the buffers.
    pub fn clear(&mut self) {
        self.text.clear();
        self.ends.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_come_back_in_order_with_their_kind_and_clear_keeps_the_buffers() {
        let mut d = TextDeltas::default();
        assert!(d.is_empty());
        d.push(true, "think");
        d.push(false, "hé");
        d.push(false, "");
        d.push(false, "llo 🦀");
        assert_eq!(d.len(), 4);
        let got: Vec<(bool, &str)> = d.iter().collect();
        assert_eq!(
            got,
            [
                (true, "think"),
                (false, "hé"),
                (false, ""),
                (false, "llo 🦀")
            ]
        );
        let cap = d.text.capacity();
        d.clear();
        assert!(d.is_empty() && d.iter().next().is_none());
        assert_eq!(d.text.capacity(), cap);
        d.push(false, "next");
        assert_eq!(d.iter().collect::<Vec<_>>(), [(false, "next")]);
    }
}
