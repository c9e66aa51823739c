//! A typed map a transport fills before connecting, read by the action through its context.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;

/// Values keyed by their type, like `http::Extensions`: how transports hand auth, request
/// metadata and the like to an action without widening its signature.
///
/// ```
/// use bidi_core::Extensions;
///
/// #[derive(Clone, Debug, PartialEq)]
/// struct User(String);
///
/// let mut ext = Extensions::new();
/// ext.insert(User("ada".into()));
/// assert_eq!(ext.get::<User>(), Some(&User("ada".into())));
/// assert!(ext.get::<u32>().is_none());
/// ```
#[derive(Default)]
pub struct Extensions {
    // Boxed and lazily allocated: most connections carry none, and every connection holds an
    // `Extensions`, so the empty map is one pointer instead of a 48-byte `HashMap`.
    #[expect(
        clippy::box_collection,
        reason = "keeps the empty map one pointer wide"
    )]
    map: Option<Box<HashMap<TypeId, Box<dyn Any + Send + Sync>>>>,
}

impl Extensions {
    /// An empty map; allocates nothing.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Inserts `value`, returning the previous value of the same type.
    pub fn insert<T: Send + Sync + 'static>(&mut self, value: T) -> Option<T> {
        self.map
            .get_or_insert_with(Box::default)
            .insert(TypeId::of::<T>(), Box::new(value))
            .and_then(|old| old.downcast().ok().map(|old| *old))
    }

    /// The value of type `T`, if any.
    #[must_use]
    pub fn get<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.map
            .as_ref()?
            .get(&TypeId::of::<T>())
            .and_then(|value| value.downcast_ref())
    }

    /// The value of type `T`, mutably, if any.
    pub fn get_mut<T: Send + Sync + 'static>(&mut self) -> Option<&mut T> {
        self.map
            .as_mut()?
            .get_mut(&TypeId::of::<T>())
            .and_then(|value| value.downcast_mut())
    }

    /// Removes and returns the value of type `T`, if any.
    pub fn remove<T: Send + Sync + 'static>(&mut self) -> Option<T> {
        self.map
            .as_mut()?
            .remove(&TypeId::of::<T>())
            .and_then(|old| old.downcast().ok().map(|old| *old))
    }

    /// How many values the map holds.
    #[must_use]
    pub fn len(&self) -> usize {
        self.map.as_ref().map_or(0, |map| map.len())
    }

    /// Whether the map is empty.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl fmt::Debug for Extensions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Extensions")
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::Extensions;

    #[test]
    fn insert_replace_remove() {
        let mut ext = Extensions::new();
        assert!(ext.is_empty());
        assert_eq!(ext.insert(1u8), None);
        assert_eq!(ext.insert(2u8), Some(1));
        assert_eq!(ext.insert("x"), None);
        assert_eq!(ext.len(), 2);
        *ext.get_mut::<u8>().expect("present") += 1;
        assert_eq!(ext.remove::<u8>(), Some(3));
        assert_eq!(ext.get::<u8>(), None);
        assert_eq!(ext.get::<&str>(), Some(&"x"));
    }
}
