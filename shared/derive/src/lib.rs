//! `#[derive(Settings)]`: the command-line flags of a configuration struct, declared on its
//! fields.
//!
//! A run's settings are declared once, as the fields of a configuration struct: the field's
//! doc comment is its documentation (rustdoc's and the flag's help), its serde attributes give
//! its TOML and `summary.json` key, and `#[setting(flag(…))]` makes it a flag (the comment's
//! first paragraph is the flag's help; later ones, with their links into the code, are
//! rustdoc's only). The derive writes the flags struct (a `clap::Args`, every field optional, so
//! a flag left out keeps the configuration's value) and its `apply`, which puts the flags given
//! over a configuration. Nothing is restated by hand.
//!
//! ```ignore
//! #[derive(Settings)]
//! #[settings(flags = FederationFlags, cfg = "cli")]
//! pub struct FederationConfig {
//!     /// Training rounds after the clustering round.
//!     #[setting(flag)]                       // `--rounds N`, an `Option<usize>` in the flags
//!     pub rounds: usize,
//!     /// Mini-batch size.
//!     #[setting(flag(long = "batch"))]       // clap's `arg(...)`, as written
//!     pub batch_size: usize,
//!     /// Proximal strength.
//!     #[setting(flag)]                       // an `Option` field stays an `Option`
//!     pub mu: Option<f64>,
//!     /// The simulate-only setting.
//!     #[setting(flag, flags = SimFlags)]     // a second flags struct, for another command
//!     pub cohort: Option<usize>,
//! }
//! ```
//!
//! Field types: `bool` gives a switch (`--hierarchy`; given, it sets the field true),
//! `Option<T>` a flag of `T` that sets `Some`, any other `T` a flag of `T`. The flags struct is
//! behind `#[cfg(feature = CFG)]` when the container says `cfg = "CFG"`. In a flag's help,
//! rustdoc's link brackets are dropped (`` [`Foo`](crate::x::Foo) `` reads `` `Foo` ``).

use std::collections::BTreeMap;

use proc_macro::TokenStream;
use proc_macro2::TokenStream as Tokens;
use quote::{format_ident, quote};
use syn::{Data, DeriveInput, Fields, Ident, LitStr, Type, parse_macro_input};

/// See the crate's documentation.
#[proc_macro_derive(Settings, attributes(settings, setting))]
pub fn derive_settings(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    match expand(&input) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// One flag: the field, its kind, clap's `arg(...)` tokens and its help lines.
struct Flag {
    field: Ident,
    ty: Type,
    kind: Kind,
    arg: Tokens,
    docs: Vec<String>,
}

/// How a field's flag sets it.
enum Kind {
    /// `bool`: a switch that sets it true.
    Switch,
    /// `Option<T>`: a flag of `T` that sets `Some`.
    Optional,
    /// Any other `T`: a flag of `T`.
    Plain,
}

fn expand(input: &DeriveInput) -> syn::Result<Tokens> {
    let name = &input.ident;
    let mut main: Option<Ident> = None;
    let mut cfg: Option<LitStr> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("settings")) {
        attr.parse_nested_meta(|meta| {
            if meta.path.is_ident("flags") {
                main = Some(meta.value()?.parse()?);
                Ok(())
            } else if meta.path.is_ident("cfg") {
                cfg = Some(meta.value()?.parse()?);
                Ok(())
            } else {
                Err(meta.error("expected `flags = Name` or `cfg = \"feature\"`"))
            }
        })?;
    }
    let main = main.unwrap_or_else(|| format_ident!("{}Flags", name));
    let Data::Struct(data) = &input.data else {
        return Err(syn::Error::new_spanned(name, "Settings takes a struct"));
    };
    let Fields::Named(fields) = &data.fields else {
        return Err(syn::Error::new_spanned(name, "Settings takes named fields"));
    };

    // The flags of each flags struct, in field order.
    let mut structs: BTreeMap<String, (Ident, Vec<Flag>)> = BTreeMap::new();
    for field in &fields.named {
        let mut flag: Option<Tokens> = None;
        let mut into: Option<Ident> = None;
        for attr in field.attrs.iter().filter(|a| a.path().is_ident("setting")) {
            attr.parse_nested_meta(|meta| {
                if meta.path.is_ident("flag") {
                    flag = Some(if meta.input.peek(syn::token::Paren) {
                        let content;
                        syn::parenthesized!(content in meta.input);
                        content.parse()?
                    } else {
                        quote!(long)
                    });
                    Ok(())
                } else if meta.path.is_ident("flags") {
                    into = Some(meta.value()?.parse()?);
                    Ok(())
                } else {
                    Err(meta.error("expected `flag`, `flag(...)` or `flags = Name`"))
                }
            })?;
        }
        let Some(arg) = flag else { continue };
        let field_name = field.ident.clone().expect("named field");
        // The first paragraph is the flag's help; the rest is rustdoc's.
        let docs = field
            .attrs
            .iter()
            .filter(|a| a.path().is_ident("doc"))
            .filter_map(|a| match &a.meta {
                syn::Meta::NameValue(nv) => match &nv.value {
                    syn::Expr::Lit(syn::ExprLit {
                        lit: syn::Lit::Str(s),
                        ..
                    }) => Some(s.value()),
                    _ => None,
                },
                _ => None,
            })
            .take_while(|line| !line.trim().is_empty())
            .map(|line| without_links(&line))
            .collect();
        let (kind, ty) = match option_inner(&field.ty) {
            Some(inner) => (Kind::Optional, inner.clone()),
            None if is_bool(&field.ty) => (Kind::Switch, field.ty.clone()),
            None => (Kind::Plain, field.ty.clone()),
        };
        let target = into.unwrap_or_else(|| main.clone());
        structs
            .entry(target.to_string())
            .or_insert_with(|| (target, Vec::new()))
            .1
            .push(Flag {
                field: field_name,
                ty,
                kind,
                arg,
                docs,
            });
    }

    let gate = cfg.map(|c| quote!(#[cfg(feature = #c)]));
    let mut out = Tokens::new();
    for (flags_name, flags) in structs.values() {
        let struct_doc = format!(
            "The command-line flags of [`{name}`] (derived from its fields by \
             `#[derive(Settings)]`): each is the field of the same name, unset when not given."
        );
        let decls = flags.iter().map(|f| {
            let Flag {
                field,
                ty,
                kind,
                arg,
                docs,
            } = f;
            let ty = match kind {
                Kind::Switch => quote!(bool),
                Kind::Optional | Kind::Plain => quote!(Option<#ty>),
            };
            quote! {
                #(#[doc = #docs])*
                #[arg(#arg)]
                pub #field: #ty,
            }
        });
        let sets = flags.iter().map(|f| {
            let field = &f.field;
            match f.kind {
                Kind::Switch => quote! {
                    if self.#field {
                        cfg.#field = true;
                    }
                },
                Kind::Optional => quote! {
                    if self.#field.is_some() {
                        cfg.#field = ::core::clone::Clone::clone(&self.#field);
                    }
                },
                Kind::Plain => quote! {
                    if let ::core::option::Option::Some(v) = &self.#field {
                        cfg.#field = ::core::clone::Clone::clone(v);
                    }
                },
            }
        });
        out.extend(quote! {
            #gate
            #[doc = #struct_doc]
            #[derive(Debug, Clone, Default, ::clap::Args)]
            pub struct #flags_name {
                #(#decls)*
            }

            #gate
            impl #flags_name {
                /// `cfg` with each flag given put over its field.
                pub fn apply(&self, cfg: &mut #name) {
                    #(#sets)*
                }
            }
        });
    }
    Ok(out)
}

/// `T` of `Option<T>` (written `Option<T>`, or a path ending in `Option<T>`).
fn option_inner(ty: &Type) -> Option<&Type> {
    let Type::Path(p) = ty else { return None };
    let last = p.path.segments.last()?;
    if last.ident != "Option" {
        return None;
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return None;
    };
    match args.args.first()? {
        syn::GenericArgument::Type(t) => Some(t),
        _ => None,
    }
}

fn is_bool(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.path.is_ident("bool"))
}

/// A doc line as help text: rustdoc's intra-doc links without their brackets and targets
/// (`` [`A`] `` → `` `A` ``, `` [`A`](crate::a::A) `` → `` `A` ``, `[text](Self::x)` → `text`);
/// other brackets (an interval, an index) as written.
fn without_links(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    while let Some(open) = rest.find('[') {
        out.push_str(&rest[..open]);
        let after = &rest[open + 1..];
        let Some(close) = after.find(']') else {
            out.push_str(&rest[open..]);
            return out;
        };
        let (text, tail) = (&after[..close], &after[close + 1..]);
        if text.contains('[') {
            out.push('[');
            rest = after;
            continue;
        }
        let target = tail
            .strip_prefix('(')
            .and_then(|t| t.find(')').map(|end| (&t[..end], &t[end + 1..])))
            .filter(|(t, _)| is_link_target(t));
        let code = text.len() >= 2 && text.starts_with('`') && text.ends_with('`');
        match target {
            Some((_, after_target)) => {
                out.push_str(text);
                rest = after_target;
            }
            None if code => {
                out.push_str(text);
                rest = tail;
            }
            None => {
                out.push('[');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A rustdoc link target: a path (`crate::a::B`, `Self::c`, `super::D`), no spaces.
fn is_link_target(s: &str) -> bool {
    !s.is_empty() && !s.contains(' ') && s.contains("::")
}

#[cfg(test)]
mod tests {
    use super::without_links;

    #[test]
    fn links_lose_their_brackets_and_targets() {
        assert_eq!(
            without_links("see [`NormBound::DEFAULT`]."),
            "see `NormBound::DEFAULT`."
        );
        assert_eq!(
            without_links("the [`Aggregate`](crate::aggregate::Aggregate) of it"),
            "the `Aggregate` of it"
        );
        assert_eq!(without_links("[the cut](Self::cut) here"), "the cut here");
        // Not links: kept as written.
        assert_eq!(without_links("in (0, 1] or [0, 1)"), "in (0, 1] or [0, 1)");
        assert_eq!(without_links("x[i] (see y)"), "x[i] (see y)");
        assert_eq!(without_links("[`a`] and [b]"), "`a` and [b]");
        assert_eq!(without_links("an open [ bracket"), "an open [ bracket");
    }
}
